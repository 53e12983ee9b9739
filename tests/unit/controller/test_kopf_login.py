"""kopf reaches the apiserver the way the operator's own client does: in a pod by the
address the kubelet gives it, never by a name only cluster DNS resolves."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes.config import incluster_config

from pitcrew.controller.operator import connection
from pitcrew.kube.client import load_configuration


@pytest.fixture
def in_a_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The service account as the kubelet mounts it, and the Service's address in the
    environment; returns the token's file."""
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("first-token")
    ca.write_text("a CA bundle")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return token


def test_in_a_pod_kopf_names_the_apiserver_by_the_service_address(in_a_pod: Path) -> None:
    info = connection(load_configuration(None))
    assert info.server == "https://10.96.0.1:443"  # not https://kubernetes.default.svc
    assert (info.scheme or "").lower() == "bearer"
    assert info.token == "first-token"
    assert info.ca_path == str(in_a_pod.with_name("ca.crt"))
    assert not info.insecure


def test_a_login_after_the_kubelet_rotated_the_token_sends_the_new_one(in_a_pod: Path) -> None:
    assert connection(load_configuration(None)).token == "first-token"
    in_a_pod.write_text("rotated-token")
    assert connection(load_configuration(None)).token == "rotated-token"


def test_with_a_kubeconfig_kopf_uses_its_server_and_client_certificate(tmp_path: Path) -> None:
    cert, key = tmp_path / "client.crt", tmp_path / "client.key"
    cert.write_text("certificate")
    key.write_text("key")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": "https://127.0.0.1:6443",
                                              "insecure-skip-tls-verify": True}}
                ],
                "users": [
                    {"name": "u", "user": {"client-certificate": str(cert),
                                           "client-key": str(key)}}
                ],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )  # fmt: skip
    info = connection(load_configuration(str(kubeconfig)))
    assert info.server == "https://127.0.0.1:6443"
    assert (info.certificate_path, info.private_key_path) == (str(cert), str(key))
    assert info.token is None
    assert info.insecure

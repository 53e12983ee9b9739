"""Install what Pitcrew needs into a devcluster, the way the Helm chart would.

CRDs, the namespace, service accounts and least-privilege RBAC (from
:mod:`pitcrew.rbac`), and a kubeconfig per service account (a token from the
TokenRequest API) so that the operator and agents can run out-of-cluster
with exactly the permissions they would have in a pod.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, utils

from pitcrew import rbac
from pitcrew.kube import crds
from pitcrew.kube.client import to_dict

TOKEN_SECONDS = 24 * 3600


def _apply(api: client.ApiClient, obj: dict[str, Any]) -> None:
    try:
        utils.create_from_dict(api, obj)
    except utils.FailToCreateError as error:
        if not all(getattr(e, "status", None) == 409 for e in error.api_exceptions):
            raise


def install(api: client.ApiClient, *, namespace: str = "pitcrew-system") -> None:
    crds.install(api)
    _apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for obj in rbac.manifests(namespace):
        _apply(api, obj)


def service_account_kubeconfig(
    api: client.ApiClient, *, component: str, namespace: str, path: Path
) -> Path:
    """Write a kubeconfig that authenticates as ``pitcrew-<component>``."""
    name = rbac.account_name(component)
    request = client.AuthenticationV1TokenRequest.model_validate(
        {"spec": {"expirationSeconds": TOKEN_SECONDS, "audiences": []}}
    )
    answer = client.CoreV1Api(api).create_namespaced_service_account_token(name, namespace, request)
    token = to_dict(api, answer)["status"]["token"]
    configuration = api.configuration
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "devcluster",
                "cluster": {
                    "server": configuration.host,
                    "certificate-authority-data": base64.b64encode(
                        Path(configuration.ssl_ca_cert).read_bytes()
                    ).decode(),
                },
            }
        ],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": "devcluster", "user": name}}],
        "current-context": name,
    }
    path.write_text(yaml.safe_dump(document))
    path.chmod(0o600)
    return path

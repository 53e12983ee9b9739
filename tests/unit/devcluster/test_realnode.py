"""What a real node is made of (no kubelet started): its configuration, command lines,
the sandbox image, and the one-line refusals (the e2e test in tests/e2e/realnode runs it)."""

from __future__ import annotations

import hashlib
import io
import json
import stat
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest

from pitcrew.dev.devcluster import realnode
from pitcrew.dev.devcluster.errors import DevclusterError

DIR = Path("/tmp/dc")
SECOND = realnode.real_nodes(DIR, [1])[0]


def test_each_node_has_its_own_address_subnet_bridge_socket_and_cgroup_root() -> None:
    first, second = realnode.real_nodes(DIR, range(2))
    assert (first.name, first.ip, str(first.subnet)) == (
        "real-node-0",
        "10.254.254.1",
        "10.245.0.0/24",
    )
    assert (second.name, second.ip, str(second.subnet)) == (
        "real-node-1",
        "10.254.254.2",
        "10.245.1.0/24",
    )
    assert len(second.bridge) <= 15  # a Linux interface name
    assert first.socket != second.socket
    assert first.cgroup_root != second.cgroup_root


def test_containerd_runs_runc_on_cgroupfs_with_a_local_sandbox_image() -> None:
    config = tomllib.loads(realnode.containerd_config(SECOND))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert config["grpc"]["address"] == str(SECOND.socket)
    assert config["root"].startswith(str(SECOND.dir))
    assert config["state"].startswith(str(SECOND.dir))
    assert cri["sandbox_image"] == realnode.PAUSE_IMAGE
    assert cri["restrict_oom_score_adj"] is True
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
    assert cri["cni"]["conf_dir"] == str(SECOND.dir / "cni")


def test_the_pod_network_is_the_nodes_bridge_and_subnet_with_the_bridge_as_gateway() -> None:
    bridge, loopback = realnode.cni_config(SECOND)["plugins"]
    assert loopback == {"type": "loopback"}
    assert (bridge["bridge"], bridge["isGateway"], bridge["ipMasq"]) == (SECOND.bridge, True, False)
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.245.1.0/24", "gateway": "10.245.1.1"}]]
    assert bridge["ipam"]["dataDir"].startswith(str(SECOND.dir))  # not /var/lib/cni


def test_the_kubelet_serves_only_the_apiserver_on_the_nodes_address() -> None:
    config = realnode.kubelet_config(SECOND, ca_cert=DIR / "ca.crt", healthz_port=4321)
    assert config["failCgroupV1"] is False
    assert config["cgroupRoot"] == SECOND.cgroup_root
    assert config["address"] == "10.254.254.2"
    assert config["healthzPort"] == 4321
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["authentication"]["x509"]["clientCAFile"] == str(DIR / "ca.crt")
    assert config["authorization"]["mode"] == "Webhook"
    assert config["containerRuntimeEndpoint"] == f"unix://{SECOND.socket}"
    assert config["podLogsDir"].startswith(str(SECOND.dir))


def test_the_kubelet_is_the_devcluster_binarys_with_the_nodes_name_ip_and_labels() -> None:
    argv = realnode.kubelet_argv(
        SECOND,
        devcluster=Path("/cache/devcluster"),
        kubeconfig=DIR / "node.kubeconfig",
        labels={"nvidia.com/gpu.present": "true", "a.example/b": "c"},
    )
    assert argv[:2] == ["/cache/devcluster", "kubelet"]
    assert "--hostname-override=real-node-1" in argv
    assert "--node-ip=10.254.254.2" in argv
    assert "--node-labels=a.example/b=c,nvidia.com/gpu.present=true" in argv
    assert f"--kubeconfig={DIR / 'node.kubeconfig'}" in argv


def test_the_kubernetes_service_is_sent_to_the_apiserver_on_loopback() -> None:
    rule = realnode.service_rule(service_ip="10.96.0.1", port=6443)
    assert rule[rule.index("-d") + 1] == "10.96.0.1/32"
    assert rule[-3:] == ["DNAT", "--to-destination", "127.0.0.1:6443"]


def blob(archive: tarfile.TarFile, digest: str) -> bytes:
    file = archive.extractfile("blobs/sha256/" + digest.removeprefix("sha256:"))
    assert file is not None
    content = file.read()
    assert hashlib.sha256(content).hexdigest() == digest.removeprefix("sha256:")
    return content


def test_the_pause_image_is_the_binary_as_pause_run_by_a_user_with_no_rights(
    tmp_path: Path,
) -> None:
    binary = tmp_path / "catatonit"
    binary.write_bytes(b"\x7fELF static pause")
    path = realnode.pause_archive(tmp_path / "pause.tar", binary=binary)
    with tarfile.open(path) as archive:
        index = json.load(archive.extractfile("index.json"))  # type: ignore[arg-type]
        (entry,) = index["manifests"]
        assert entry["annotations"]["io.containerd.image.name"] == realnode.PAUSE_IMAGE
        manifest: dict[str, Any] = json.loads(blob(archive, entry["digest"]))
        config = json.loads(blob(archive, manifest["config"]["digest"]))
        assert config["config"] == {"Entrypoint": ["/pause", "-P"], "User": "65535:65535"}
        (layer,) = manifest["layers"]
        with tarfile.open(fileobj=io.BytesIO(blob(archive, layer["digest"]))) as files:
            (pause,) = files.getmembers()
            assert pause.name == "pause"
            assert stat.S_IMODE(pause.mode) == 0o755
            assert files.extractfile(pause).read() == binary.read_bytes()  # type: ignore[union-attr]


def test_a_machine_without_root_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(realnode.os, "geteuid", lambda: 1000)
    with pytest.raises(DevclusterError, match=r"^real nodes need root \(") as refused:
        realnode.check_host()
    assert "\n" not in str(refused.value)


def test_missing_tools_are_named_with_what_installs_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(realnode.os, "geteuid", lambda: 0)
    monkeypatch.setattr(realnode.shutil, "which", lambda name: None if name == "ctr" else name)
    monkeypatch.setattr(realnode, "CATATONIT", Path("/nonexistent/catatonit"))
    with pytest.raises(DevclusterError) as refused:
        realnode.check_host()
    message = str(refused.value)
    assert "ctr, /nonexistent/catatonit" in message
    assert "make real-node-tools" in message
    assert "\n" not in message


def test_teardown_without_real_nodes_changes_nothing(tmp_path: Path) -> None:
    stopped: list[str] = []
    realnode.teardown(tmp_path, stop=stopped.append, log=stopped.append)
    assert stopped == []

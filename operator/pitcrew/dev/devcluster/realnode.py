"""Real kubelet nodes beside kwok's simulated ones: containers that really run.

kwok's nodes run no containers, so nothing a pod does on a node (the agent reading
``/dev/kmsg`` with the capability the chart grants, a projected token bound to the
pod, a security context the runtime enforces) is tried on them. A real node is the
devcluster binary's own kubelet (built from the control plane's Kubernetes module)
with a containerd of its own (Debian's, runc and cgroupfs), on this machine.

Each real node has its own containerd (two kubelets sharing one would remove each
other's containers as strangers), its own cgroup root, bridge, pod subnet and
address on ``lo``: a kubelet refuses a loopback node IP, and the apiserver reaches
kubelets by that address (``--kubelet-preferred-address-types=InternalIP``), since a
node's name resolves nowhere. Nothing is pulled: the sandbox ("pause") image is
written here from Debian's static ``catatonit``, and images a test needs are
imported (:func:`import_image`).

Pods that are not ``hostNetwork`` reach the apiserver as in any cluster, through
the ``kubernetes`` Service's address: one DNAT rule (this module's own iptables
chain) sends it to the apiserver on 127.0.0.1, which the node's bridge may route to
(``route_localnet``). There is no kube-proxy and no other Service works.

A kubelet changes the host: it rewrites three sysctls and adds iptables chains of its
own. Everything that ``up`` or the kubelet adds is recorded in ``DIR/real-nodes.json``
before it is added, so that :func:`teardown` (called by ``devcluster down``, and by a
failed ``up``) undoes exactly that: processes, containers and their network
namespaces, mounts, cgroups, links, addresses, iptables chains, sysctls and folders.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import gzip
import hashlib
import io
import ipaddress
import json
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml
from kubernetes import client

from pitcrew.dev.devcluster.errors import DevclusterError

NODE_PREFIX = "real-node-"
NODE_IPS = ipaddress.ip_network("10.254.254.0/24")
POD_SUBNETS = ipaddress.IPv4Network("10.245.0.0/16")
"""Outside the pod CIDR kwok hands its fake pods' addresses from."""
PAUSE_IMAGE = "localhost/pause:catatonit"
CATATONIT = Path("/usr/bin/catatonit")
CNI_BIN = Path("/usr/lib/cni")
CHAIN = "PITCREW-REALNODES"
OURS = (CHAIN, "KUBE-")
"""The iptables chains teardown removes when they were not there before (the kubelet's
are KUBE-FIREWALL, KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT)."""
KUBELET_SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")
"""What a kubelet that does not protect kernel defaults sets on the host."""
HOST_DIRS = (Path("/var/log/containers"), Path("/run/containerd"), Path("/var/lib/cni"))
"""Folders a kubelet or containerd writes whatever their configuration says."""
NETNS_DIR = Path("/var/run/netns")
CGROUP_MOUNTS = Path("/sys/fs/cgroup")
TOOLS = ("containerd", "ctr", "iptables", "ip")
IMPORT_TIMEOUT = 300.0
REMOVE_TIMEOUT = 60.0


@dataclass(frozen=True)
class RealNode:
    """One real node: its name, where its files go, and its addresses."""

    index: int
    dir: Path

    @property
    def name(self) -> str:
        return f"{NODE_PREFIX}{self.index}"

    @property
    def ip(self) -> str:
        return str(NODE_IPS[self.index + 1])

    @property
    def bridge(self) -> str:
        return f"pitcrew-rn{self.index}"

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network((int(POD_SUBNETS.network_address) + (self.index << 8), 24))

    @property
    def socket(self) -> Path:
        return self.dir / "containerd" / "containerd.sock"

    @property
    def cgroup_root(self) -> str:
        return f"/pitcrew-{self.name}"


def real_nodes(directory: Path, indexes: Iterable[int]) -> list[RealNode]:
    return [RealNode(index=i, dir=directory / "real-nodes" / f"{NODE_PREFIX}{i}") for i in indexes]


# Builders: configuration and command lines as values.


def containerd_config(node: RealNode) -> str:
    """containerd's configuration: its own root, state and socket; runc with cgroupfs;
    a sandbox image that is never pulled; the node's bridge network.

    ``restrict_oom_score_adj``: the CRI lowers the sandbox's oom_score_adj below the
    caller's, which needs CAP_SYSTEM_RESOURCE that some machines (this project's CI
    VMs) do not have; runc then fails every sandbox."""
    base = node.dir / "containerd"
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return "\n".join(
        [
            "version = 2",
            f'root = "{base / "root"}"',
            f'state = "{base / "state"}"',
            "[grpc]",
            f'  address = "{node.socket}"',
            '[plugins."io.containerd.internal.v1.opt"]',
            f'  path = "{base / "opt"}"',
            f"[{cri}]",
            f'  sandbox_image = "{PAUSE_IMAGE}"',
            "  disable_apparmor = true",
            "  restrict_oom_score_adj = true",
            '  stream_server_address = "127.0.0.1"',
            '  stream_server_port = "0"',
            f"[{cri}.containerd]",
            '  default_runtime_name = "runc"',
            f"[{cri}.containerd.runtimes.runc]",
            '  runtime_type = "io.containerd.runc.v2"',
            f"[{cri}.containerd.runtimes.runc.options]",
            "  SystemdCgroup = false",
            f"[{cri}.cni]",
            f'  bin_dir = "{CNI_BIN}"',
            f'  conf_dir = "{node.dir / "cni"}"',
            "",
        ]
    )


def cni_config(node: RealNode) -> dict[str, Any]:
    """A bridge network with the node's subnet; the bridge is the pods' gateway, so
    that the ``kubernetes`` Service address leaves the pod towards the host. Nothing
    is masqueraded: the pods reach this machine and nothing beyond it."""
    hosts = list(node.subnet.hosts())
    return {
        "cniVersion": "0.4.0",
        "name": f"pitcrew-{node.name}",
        "plugins": [
            {
                "type": "bridge",
                "bridge": node.bridge,
                "isGateway": True,
                "ipMasq": False,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(node.dir / "cni-ipam"),
                    "ranges": [[{"subnet": str(node.subnet), "gateway": str(hosts[0])}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "loopback"},
        ],
    }


def kubelet_config(node: RealNode, *, ca_cert: Path, healthz_port: int) -> dict[str, Any]:
    """The KubeletConfiguration. The apiserver calls the kubelet (logs, exec) with a
    client certificate of the devcluster CA, and the kubelet asks the apiserver who
    may do what (Webhook), as on a kubeadm node.

    ``failCgroupV1: false``: hosts with cgroup v1 (the project's CI VMs) are refused by
    default since Kubernetes 1.35. Image garbage collection is off: the images were
    imported and cannot be pulled again."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_root,
        "containerRuntimeEndpoint": f"unix://{node.socket}",
        "failSwapOn": False,
        "address": node.ip,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "podLogsDir": str(node.dir / "pod-logs"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_cert)},
        },
        "authorization": {"mode": "Webhook"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
    }


def containerd_argv(node: RealNode) -> list[str]:
    return [_tool("containerd"), "--config", str(node.dir / "containerd" / "config.toml")]


def kubelet_argv(
    node: RealNode, *, devcluster: Path, kubeconfig: Path, labels: dict[str, str]
) -> list[str]:
    return [
        str(devcluster),
        "kubelet",
        f"--config={node.dir / 'kubelet.yaml'}",
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={node.name}",
        f"--node-ip={node.ip}",
        "--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
        f"--root-dir={node.dir / 'kubelet'}",
        f"--cert-dir={node.dir / 'kubelet-certs'}",
    ]


def service_rule(*, service_ip: str, port: int) -> list[str]:
    """The DNAT rule in :data:`CHAIN`: the ``kubernetes`` Service to the apiserver."""
    return [
        "-d", f"{service_ip}/32", "-p", "tcp", "--dport", "443",
        "-j", "DNAT", "--to-destination", f"127.0.0.1:{port}",
    ]  # fmt: skip


def pause_archive(path: Path, *, binary: Path = CATATONIT) -> Path:
    """An OCI archive of the sandbox image: ``binary`` as ``/pause``, run as ``-P``
    (pause mode) by user 65535. A static catatonit needs nothing else."""
    epoch = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
    layer_tar = io.BytesIO()
    with tarfile.open(fileobj=layer_tar, mode="w") as layer:
        data = binary.read_bytes()
        info = tarfile.TarInfo("pause")
        info.size, info.mode, info.mtime = len(data), 0o755, int(epoch.timestamp())
        layer.addfile(info, io.BytesIO(data))
    diff = layer_tar.getvalue()
    compressed = gzip.compress(diff, mtime=0)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": epoch.isoformat().replace("+00:00", "Z"),
        "config": {"Entrypoint": ["/pause", "-P"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [_digest(diff)]},
    }
    blobs: dict[str, bytes] = {}

    def descriptor(media_type: str, content: bytes, **extra: Any) -> dict[str, Any]:
        blobs[_digest(content)] = content
        return {"mediaType": media_type, "digest": _digest(content), "size": len(content), **extra}

    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": descriptor("application/vnd.oci.image.config.v1+json", _json(config)),
        "layers": [descriptor("application/vnd.oci.image.layer.v1.tar+gzip", compressed)],
    }
    index = {
        "schemaVersion": 2,
        "manifests": [
            descriptor(
                "application/vnd.oci.image.manifest.v1+json",
                _json(manifest),
                annotations={"io.containerd.image.name": PAUSE_IMAGE},
            )
        ],
    }
    with tarfile.open(path, "w") as archive:
        files = {
            "oci-layout": _json({"imageLayoutVersion": "1.0.0"}),
            "index.json": _json(index),
            **{f"blobs/sha256/{d.removeprefix('sha256:')}": b for d, b in blobs.items()},
        }
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return path


def _digest(content: bytes) -> str:
    return "sha256:" + hashlib.sha256(content).hexdigest()


def _json(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


# What up changed on the host, so that down undoes exactly that.


@dataclass
class HostChanges:
    """Persisted as ``DIR/real-nodes.json`` before each change is made."""

    nodes: list[int] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)
    """The values before the first kubelet started."""
    chains: dict[str, list[str]] = field(default_factory=dict)
    """``"iptables nat"``: the chains that were there before (the kubelet's are not)."""
    dirs: list[str] = field(default_factory=list)
    """Host folders that did not exist before (:data:`HOST_DIRS`, ``/var/run/netns``)."""

    @staticmethod
    def path(directory: Path) -> Path:
        return directory / "real-nodes.json"

    @classmethod
    def load(cls, directory: Path) -> HostChanges | None:
        path = cls.path(directory)
        return cls(**json.loads(path.read_text())) if path.is_file() else None

    def save(self, directory: Path) -> None:
        self.path(directory).write_text(json.dumps(asdict(self), indent=2))


class Launcher(Protocol):
    """What starts and watches the devcluster's processes (the cluster's launch)."""

    def start(self, name: str, argv: list[str]) -> Any: ...

    def wait_for(
        self, process: Any, check: Callable[[], bool], *, timeout: float, what: str
    ) -> None: ...


def check_host() -> None:
    """Refuse, in one line, a machine where a kubelet cannot run."""
    if os.geteuid() != 0:
        raise DevclusterError("real nodes need root (a kubelet manages cgroups, mounts and links)")
    if not any(CGROUP_MOUNTS.iterdir()):
        raise DevclusterError(f"real nodes need cgroups: nothing is mounted at {CGROUP_MOUNTS}")
    missing = [t for t in TOOLS if not shutil.which(t)]
    missing += [str(p) for p in (CATATONIT, CNI_BIN / "bridge") if not p.exists()]
    if missing:
        raise DevclusterError(
            f"real nodes need {', '.join(missing)}: run `make real-node-tools` "
            "(Debian packages containerd, catatonit, containernetworking-plugins, iptables)"
        )


def start(
    launch: Launcher,
    *,
    directory: Path,
    count: int,
    devcluster: Path,
    kubeconfig: Callable[[str], Path],
    admin: client.ApiClient,
    ca_cert: Path,
    service_ip: str,
    apiserver_port: int,
    labels: dict[str, str],
    resource: str,
    gpus: int,
    free_port: Callable[[], int],
    timeout: float,
    log: Callable[[str], None],
) -> list[RealNode]:
    """Start ``count`` real nodes and return once each is Ready, with ``labels`` and
    ``gpus`` of the GPU resource in its capacity (what a device plugin would say)."""
    check_host()
    nodes = real_nodes(directory, range(count))
    changes = HostChanges(nodes=[n.index for n in nodes])
    changes.sysctls = {name: _read_sysctl(name) for name in KUBELET_SYSCTLS}
    changes.chains = {f"{tool} {table}": _chains(tool, table) for tool, table in _tables()}
    changes.dirs = [str(d) for d in (*HOST_DIRS, NETNS_DIR) if not d.exists()]
    changes.save(directory)

    pause = pause_archive(directory / "pause.oci.tar")
    _run(["iptables", "-t", "nat", "-N", CHAIN])
    _run(
        [
            "iptables",
            "-t",
            "nat",
            "-A",
            CHAIN,
            *service_rule(service_ip=service_ip, port=apiserver_port),
        ]
    )
    _run(["iptables", "-t", "nat", "-I", "PREROUTING", "-j", CHAIN])
    for node in nodes:
        started = time.monotonic()
        for sub in ("containerd", "cni", "kubelet", "kubelet-certs", "pod-logs", "cni-ipam"):
            (node.dir / sub).mkdir(parents=True, exist_ok=True)
        (node.dir / "containerd" / "config.toml").write_text(containerd_config(node))
        (node.dir / "cni" / "10-pitcrew.conflist").write_text(json.dumps(cni_config(node)))
        (node.dir / "kubelet.yaml").write_text(
            yaml.safe_dump(kubelet_config(node, ca_cert=ca_cert, healthz_port=free_port()))
        )
        _make_cgroups(node)
        _run(["ip", "addr", "add", f"{node.ip}/32", "dev", "lo"])
        _run(["ip", "link", "add", node.bridge, "type", "bridge"])
        _write_sysctl(f"net/ipv4/conf/{node.bridge}/route_localnet", "1")
        _run(["ip", "link", "set", node.bridge, "up"])

        containerd = launch.start(f"containerd-{node.name}", containerd_argv(node))
        launch.wait_for(containerd, node.socket.exists, timeout=timeout, what="serving")
        import_image(node, pause)
        argv = kubelet_argv(
            node, devcluster=devcluster, kubeconfig=kubeconfig(node.name), labels=labels
        )
        kubelet = launch.start(f"kubelet-{node.name}", argv)
        core = client.CoreV1Api(admin)
        launch.wait_for(
            kubelet, functools.partial(_ready, core, node.name), timeout=timeout, what="Ready"
        )
        if gpus:
            _advertise(core, node.name, resource=resource, count=gpus)
        log(f"real node {node.name} Ready in {time.monotonic() - started:.1f}s ({node.ip})")
    return nodes


def import_image(node: RealNode, archive: Path) -> None:
    """Import an OCI archive into ``node``'s containerd, where the kubelet finds it
    (namespace ``k8s.io``): pods name it with ``imagePullPolicy: Never``."""
    _run(
        [
            _tool("ctr"),
            "--address",
            str(node.socket),
            "-n",
            "k8s.io",
            "images",
            "import",
            str(archive),
        ],
        timeout=IMPORT_TIMEOUT,
    )


def _ready(core: client.CoreV1Api, name: str) -> bool:
    try:
        node = core.read_node(name)
    except client.ApiException as error:
        if error.status == 404:
            return False
        raise
    conditions = (node.status and node.status.conditions) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _advertise(core: client.CoreV1Api, name: str, *, resource: str, count: int) -> None:
    """The GPUs in the node's capacity, as a device plugin would put them; the kubelet
    keeps an extended resource it does not manage."""
    patch = [
        {
            "op": "add",
            "path": f"/status/capacity/{resource.replace('/', '~1')}",
            "value": str(count),
        }
    ]
    core.patch_node_status(name, patch)  # a list: a JSON patch


# Teardown.


def teardown(
    directory: Path, *, stop: Callable[[str], None], log: Callable[[str], None] = print
) -> None:
    """Undo what :func:`start` did, in reverse: the kubelets, every container and its
    network namespace, containerd and its shims, mounts, cgroups, bridges, addresses,
    iptables chains (this module's and the kubelet's), sysctls and host folders.
    ``stop`` stops one of the devcluster's processes by name. Safe to run twice."""
    changes = HostChanges.load(directory)
    if changes is None:
        return
    nodes = real_nodes(directory, changes.nodes)
    for node in nodes:
        stop(f"kubelet-{node.name}")
    for node in nodes:
        namespaces = _remove_containers(node)
        stop(f"containerd-{node.name}")
        _stop_shims(node)
        _unmount(node.dir, *namespaces)
        for path in namespaces:
            with contextlib.suppress(OSError):
                Path(path).unlink(missing_ok=True)
        _remove_cgroups(node)
        _quiet(["ip", "link", "del", node.bridge])
        _quiet(["ip", "addr", "del", f"{node.ip}/32", "dev", "lo"])
    for tool, table in _tables():
        before = set(changes.chains.get(f"{tool} {table}", []))
        added = [c for c in _chains(tool, table) if c not in before and c.startswith(OURS)]
        _remove_chains(tool, table, added)
    for name, value in changes.sysctls.items():
        _write_sysctl(name, value)
    for folder in changes.dirs:
        shutil.rmtree(folder, ignore_errors=True)
    HostChanges.path(directory).unlink()
    log(f"removed {len(nodes)} real node(s) and what they changed on this machine")


def _remove_containers(node: RealNode) -> list[str]:
    """Kill and delete every container of the node's containerd; returns the network
    namespaces their sandboxes held (the CRI would have removed them)."""
    if not node.socket.exists():
        return []
    ctr = [_tool("ctr"), "--address", str(node.socket), "-n", "k8s.io"]
    listed = _quiet([*ctr, "containers", "list", "-q"])
    namespaces: list[str] = []
    for container in listed.split():
        info = json.loads(_quiet([*ctr, "containers", "info", container]) or "{}")
        for namespace in (info.get("Spec") or {}).get("linux", {}).get("namespaces", []):
            if namespace.get("type") == "network" and namespace.get("path"):
                # /var/run/netns/...: mountinfo names it by its real path, /run/netns/...
                namespaces.append(os.path.realpath(namespace["path"]))
        _quiet([*ctr, "tasks", "kill", "--signal", "SIGKILL", container])
        _quiet([*ctr, "tasks", "delete", "--force", container], timeout=REMOVE_TIMEOUT)
        _quiet([*ctr, "containers", "delete", container])
    return sorted(set(namespaces))


def _stop_shims(node: RealNode) -> None:
    """containerd's shims outlive it; these are the ones that serve this node's socket."""
    marker = str(node.socket).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if argv[0].endswith(b"containerd-shim-runc-v2") and marker in argv:
                os.kill(int(proc.name), 9)


def _unmount(folder: Path, *paths: str) -> None:
    """Unmount what is mounted under ``folder`` or at ``paths``, deepest first."""
    wanted = (str(folder) + "/", *paths)
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(wanted[0]) or point in wanted[1:] or point == str(folder):
            points.append(point)
    for point in sorted(points, key=len, reverse=True):
        _quiet(["umount", "--lazy", point])


def _make_cgroups(node: RealNode) -> None:
    """The node's cgroup root in every hierarchy; a v1 cpuset starts with no CPUs and
    memory nodes of its own, so it gets its parent's."""
    for hierarchy in _hierarchies():
        path = hierarchy / node.cgroup_root.lstrip("/")
        path.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (path / name).exists() and not (path / name).read_text().strip():
                (path / name).write_text((hierarchy / name).read_text())


def _remove_cgroups(node: RealNode) -> None:
    for hierarchy in _hierarchies():
        root = hierarchy / node.cgroup_root.lstrip("/")
        if root.is_dir():
            for path in sorted(
                (p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
            ):
                with contextlib.suppress(OSError):
                    path.rmdir()
            with contextlib.suppress(OSError):
                root.rmdir()


def _hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies (v1 controllers, v2 unified or alone)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        before, _, after = line.partition(" - ")
        if after.split()[0] in ("cgroup", "cgroup2"):
            found.append(Path(before.split()[4]))
    return found


def _tables() -> Iterable[tuple[str, str]]:
    for tool in ("iptables", "ip6tables"):
        if shutil.which(tool):
            for table in ("filter", "nat", "mangle"):
                yield tool, table


def _chains(tool: str, table: str) -> list[str]:
    rules = _quiet([tool, "-w", "-t", table, "-S"])
    return [line.split()[1] for line in rules.splitlines() if line.startswith("-N ")]


def _remove_chains(tool: str, table: str, chains: list[str]) -> None:
    """Delete the jumps to ``chains``, then flush and delete them."""
    if not chains:
        return
    for line in _quiet([tool, "-w", "-t", table, "-S"]).splitlines():
        words = line.split()
        if words[0] == "-A" and any(w in chains for w in words[2:]):
            _quiet([tool, "-w", "-t", table, "-D", *words[1:]])
    for chain in chains:
        _quiet([tool, "-w", "-t", table, "-F", chain])
    for chain in chains:
        _quiet([tool, "-w", "-t", table, "-X", chain])


def _read_sysctl(name: str) -> str:
    return (Path("/proc/sys") / name).read_text().strip()


def _write_sysctl(name: str, value: str) -> None:
    (Path("/proc/sys") / name).write_text(value)


def _tool(name: str) -> str:
    found = shutil.which(name)
    if not found:
        raise DevclusterError(f"real nodes need {name}: run `make real-node-tools`")
    return found


def _run(argv: list[str], *, timeout: float = 30.0) -> str:
    """Run a host command; its failure is one line naming it and what it said."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise DevclusterError(f"`{' '.join(argv)}` failed: {said[-1] if said else done.returncode}")
    return done.stdout


def _quiet(argv: list[str], *, timeout: float = 30.0) -> str:
    """A teardown step: what is already gone is no error."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""

"""Start and stop a real local Kubernetes control plane with simulated GPU nodes,
and real kubelet nodes beside them on request (:mod:`pitcrew.dev.devcluster.realnode`).

The launcher starts etcd, kube-apiserver (authorization Node,RBAC, real
x509 authentication), kube-controller-manager (all default controllers, each
with its own service-account credentials), kube-scheduler and kwok, each on
a free loopback port, as detached processes, and returns once every fake node
is Ready. The processes outlive the ``pitcrew devcluster up`` command; their
pids are recorded in ``DIR/state.json`` so that ``down`` stops exactly those
processes and nothing else.

Failure is loud and leaves nothing behind: if a component exits or does not
become healthy in time, everything started so far is stopped and the error
names the component with the tail of its log.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from gpuhealth.models import GpuModel
from pitcrew.api.vocabulary import GPU_RESOURCE, SIMULATED_LABEL
from pitcrew.dev.devcluster import build, nodes, pki, realnode
from pitcrew.dev.devcluster.errors import DevclusterError
from pitcrew.kube.client import api_client

STAGES_FILE = Path(__file__).with_name("stages.yaml")
LOG_TAIL_LINES = 30
STOP_GRACE_SECONDS = 10.0
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
POD_CIDR = "10.244.0.0/16"


@dataclass
class Process:
    name: str
    pid: int
    executable: str
    log: str
    argv: list[str] = field(default_factory=list)
    """How it was started, so that :func:`restart` can start it again the same way."""


@dataclass
class ClusterState:
    """What ``up`` started; persisted as ``DIR/state.json``."""

    dir: str
    server: str
    kubeconfig: str
    nodes: int
    gpus_per_node: int
    gpu_model: str
    processes: list[Process] = field(default_factory=list)
    real_nodes: int = 0

    @classmethod
    def load(cls, directory: Path) -> ClusterState | None:
        path = directory / "state.json"
        if not path.is_file():
            return None
        raw = json.loads(path.read_text())
        raw["processes"] = [Process(**p) for p in raw["processes"]]
        return cls(**raw)

    def save(self) -> None:
        (Path(self.dir) / "state.json").write_text(json.dumps(asdict(self), indent=2))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ensure_port_free(port: int, *, component: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as error:
            raise DevclusterError(
                f"{component}: port 127.0.0.1:{port} is in use ({error.strerror}); "
                "stop what holds it or choose another port"
            ) from error


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def is_alive(process: Process) -> bool:
    """True when ``pid`` still runs our executable (not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes()
    except OSError:
        return False
    return cmdline.split(b"\0", 1)[0].decode(errors="replace") == process.executable


def stop_process(process: Process) -> None:
    if not is_alive(process):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    while time.monotonic() < deadline and is_alive(process):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(process.pid, os.WNOHANG)
        time.sleep(0.1)
    if is_alive(process):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(process.pid, 0)


def write_kubeconfig(
    path: Path, *, server: str, pki_: pki.Pki, user: str, context: str = "devcluster"
) -> None:
    def b64(file: Path) -> str:
        return base64.b64encode(file.read_bytes()).decode()

    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {"server": server, "certificate-authority-data": b64(pki_.ca_cert)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(pki_.client_cert(user)),
                    "client-key-data": b64(pki_.client_key(user)),
                },
            }
        ],
        "contexts": [{"name": context, "context": {"cluster": context, "user": user}}],
        "current-context": context,
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    path.chmod(0o600)


class _Launch:
    """One ``up`` in progress: starts components and tears them down on failure."""

    def __init__(self, state: ClusterState, *, log: Callable[[str], None]) -> None:
        self.state = state
        self.dir = Path(state.dir)
        self.log = log

    def start(self, name: str, argv: list[str]) -> Process:
        log_path = self.dir / "logs" / f"{name}.log"
        with log_path.open("ab") as log_file:
            popen = subprocess.Popen(
                argv,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        process = Process(
            name=name, pid=popen.pid, executable=argv[0], log=str(log_path), argv=list(argv)
        )
        self.state.processes = [p for p in self.state.processes if p.name != name]
        self.state.processes.append(process)
        self.state.save()
        return process

    def wait_for(
        self, process: Process, check: Callable[[], bool], *, timeout: float, what: str
    ) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(ChildProcessError):
                pid, status = os.waitpid(process.pid, os.WNOHANG)
                if pid:
                    raise DevclusterError(
                        f"{process.name} exited with code {os.waitstatus_to_exitcode(status)} "
                        f"before {what}; "
                        f"last lines of {process.log}:\n{log_tail(Path(process.log))}"
                    )
            if check():
                return
            if time.monotonic() > deadline:
                raise DevclusterError(
                    f"{process.name}: not {what} after {timeout:.0f}s; "
                    f"last lines of {process.log}:\n{log_tail(Path(process.log))}"
                )
            time.sleep(0.2)


def _http_ok(url: str, *, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:  # noqa: S310
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _insecure_context() -> ssl.SSLContext:
    # kube-controller-manager and kube-scheduler serve /healthz with a
    # certificate they sign themselves at start; nothing to verify it against.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def up(
    *,
    directory: Path,
    node_count: int,
    gpus_per_node: int,
    model: GpuModel,
    apiserver_port: int | None = None,
    timeout: float = 180.0,
    apiserver_flags: dict[str, str] | None = None,
    beat: Heartbeats | None = None,
    real_nodes: int = 0,
    log: Callable[[str], None] = print,
) -> ClusterState:
    """Build if needed, start the control plane and ``node_count`` fake GPU nodes;
    past 1,000 nodes the kubelets' heartbeats slow down with the fleet
    (:func:`heartbeats`) unless ``beat`` says how often they come. ``real_nodes``
    real kubelets join beside them (:mod:`~pitcrew.dev.devcluster.realnode`: root only),
    with the same GPU labels and resource.
    ``apiserver_flags`` (``{"--name": "value"}``) add to kube-apiserver's or replace
    them (a benchmark's audit log)."""
    directory = directory.resolve()
    existing = ClusterState.load(directory)
    if existing and any(is_alive(p) for p in existing.processes):
        raise DevclusterError(
            f"a devcluster is already running in {directory}; "
            f"run `pitcrew devcluster down --dir {directory}` first"
        )
    if apiserver_port is not None:
        ensure_port_free(apiserver_port, component="kube-apiserver")
    if real_nodes:
        realnode.check_host()
    binaries = build.ensure_built(log=log)

    shutil.rmtree(directory, ignore_errors=True)
    (directory / "logs").mkdir(parents=True)
    started = time.monotonic()
    credentials = pki.create(directory / "pki")
    port = apiserver_port or free_port()
    server = f"https://127.0.0.1:{port}"
    state = ClusterState(
        dir=str(directory),
        server=server,
        kubeconfig=str(directory / "kubeconfig"),
        nodes=node_count,
        gpus_per_node=gpus_per_node,
        gpu_model=model.name,
        real_nodes=real_nodes,
    )
    for user in pki.CLIENTS:
        name = "kubeconfig" if user == "admin" else f"{user}.kubeconfig"
        write_kubeconfig(directory / name, server=server, pki_=credentials, user=user)

    launch = _Launch(state, log=log)
    try:
        _start_components(
            launch,
            binaries=binaries,
            credentials=credentials,
            port=port,
            timeout=timeout,
            beat=beat or heartbeats(node_count),
            apiserver_flags=apiserver_flags or {},
        )
        log(
            f"Control plane up in {time.monotonic() - started:.1f}s; "
            f"creating {node_count} GPU nodes ({gpus_per_node}x {model.name})."
        )
        # A pool as large as the creating threads: the client's default of 10 warns
        # "Connection pool is full" on the demo's first screen.
        admin = api_client(state.kubeconfig)
        nodes.create_nodes(
            client.CoreV1Api(admin), count=node_count, model=model, gpus=gpus_per_node
        )
        kwok = next(p for p in state.processes if p.name == "kwok")
        launch.wait_for(
            kwok,
            lambda: nodes.ready_count(admin) >= node_count,
            timeout=timeout,
            what=f"all {node_count} nodes Ready",
        )
        if real_nodes:
            realnode.start(
                launch,
                directory=directory,
                count=real_nodes,
                devcluster=binaries.devcluster,
                kubeconfig=lambda name: node_kubeconfig(directory=directory, node=name),
                admin=admin,
                ca_cert=credentials.ca_cert,
                service_ip=KUBERNETES_SERVICE_IP,
                apiserver_port=port,
                labels=nodes.gpu_labels(model=model, gpus=gpus_per_node),
                resource=GPU_RESOURCE,
                gpus=gpus_per_node,
                free_port=free_port,
                timeout=timeout,
                log=log,
            )
    except BaseException:
        _stop_all(state, log=lambda _: None)
        (directory / "state.json").unlink(missing_ok=True)
        raise
    log(
        f"devcluster ready in {time.monotonic() - started:.1f}s: {server}, "
        f"{node_count} nodes Ready" + (f", {real_nodes} real." if real_nodes else ".")
    )
    return state


def _stop_all(state: ClusterState, *, log: Callable[[str], None]) -> None:
    """Stop the real nodes first (their containers, and what they changed on the
    host), then every process, newest first."""

    def stop(name: str) -> None:
        for process in state.processes:
            if process.name == name and is_alive(process):
                stop_process(process)
                log(f"stopped {process.name} (pid {process.pid})")

    realnode.teardown(Path(state.dir), stop=stop, log=log)
    for process in reversed(state.processes):
        stop(process.name)


@dataclass(frozen=True)
class Heartbeats:
    """How often kwok renews each node's Lease and rewrites its status, and how long
    the node lifecycle controller waits for either before it calls a node NotReady."""

    lease_seconds: int
    status_seconds: int
    status_jitter_seconds: int

    def grace_flags(self) -> list[str]:
        """The controller-manager's grace period when the Lease is longer than a
        kubelet's (its default, 50 s, is five missed renewals of a 40 s Lease)."""
        if self.lease_seconds <= BEATS_AT_1000.lease_seconds:
            return []
        return [f"--node-monitor-grace-period={self.lease_seconds + 10}s"]


BEATS_AT_1000 = Heartbeats(lease_seconds=40, status_seconds=60, status_jitter_seconds=65)
"""A kubelet's defaults (a Lease of 40 s renewed every 10 s), and a status write every
60 to 125 s (a real kubelet's is 5 minutes unless something changed)."""


def heartbeats(node_count: int) -> Heartbeats:
    """Heartbeats that cost the control plane what 1,000 nodes at the defaults cost.

    At 10 s renewals 10,000 Leases are 1,000 writes a second, more than the whole
    two-core machine serves beside anything else; a fleet that large on one machine
    renews proportionally less often (about 100 Lease and 10 status writes a second
    at any size), and the grace period grows with it so no node goes NotReady
    between two renewals. Nothing Pitcrew does depends on these intervals: it reads
    Ready, which stays True."""
    scale = max(1.0, node_count / 1000)
    return Heartbeats(
        lease_seconds=round(BEATS_AT_1000.lease_seconds * scale),
        status_seconds=round(BEATS_AT_1000.status_seconds * scale),
        status_jitter_seconds=round(BEATS_AT_1000.status_jitter_seconds * scale),
    )


def stages(beat: Heartbeats) -> str:
    """kwok's stages with the node status heartbeat of ``beat``."""
    text = STAGES_FILE.read_text()
    base = BEATS_AT_1000
    for field_name, old, new in (
        ("durationMilliseconds", base.status_seconds, beat.status_seconds),
        ("jitterDurationMilliseconds", base.status_jitter_seconds, beat.status_jitter_seconds),
    ):
        line = f"    {field_name}: {old * 1000}\n"
        if line not in text:
            raise DevclusterError(f"{STAGES_FILE} has no {line.strip()!r} to scale")
        text = text.replace(line, f"    {field_name}: {new * 1000}\n")
    return text


def _start_components(
    launch: _Launch,
    *,
    binaries: build.Binaries,
    credentials: pki.Pki,
    port: int,
    timeout: float,
    beat: Heartbeats,
    apiserver_flags: dict[str, str],
) -> None:
    directory = launch.dir
    control_plane = str(binaries.devcluster)
    etcd_port, peer_port = free_port(), free_port()
    etcd = launch.start(
        "etcd",
        [
            control_plane,
            "etcd",
            "--name=devcluster",
            f"--data-dir={directory / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
            f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-cluster=devcluster=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ],
    )
    launch.wait_for(
        etcd,
        lambda: _http_ok(f"http://127.0.0.1:{etcd_port}/health"),
        timeout=timeout,
        what="healthy",
    )

    apiserver = launch.start(
        "kube-apiserver",
        with_flags(
            [
                control_plane,
                "kube-apiserver",
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--tls-cert-file={credentials.serving_cert}",
                f"--tls-private-key-file={credentials.serving_key}",
                f"--client-ca-file={credentials.ca_cert}",
                f"--service-account-key-file={credentials.sa_pub}",
                f"--service-account-signing-key-file={credentials.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                # As strict as kubeadm: a kubelet may change only its own Node and the pods
                # bound to it (tests act as a compromised node with `devcluster kubeconfig`).
                "--enable-admission-plugins=NodeRestriction",
                # The kubernetes Service cannot point at a loopback address; nothing in a
                # devcluster needs it to, so no endpoint reconciler runs.
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                # A real node's name resolves nowhere (DNS would leave the machine): the
                # apiserver calls kubelets at their InternalIP, as kubeadm's identity.
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-client-certificate={credentials.client_cert(pki.KUBELET_CLIENT)}",
                f"--kubelet-client-key={credentials.client_key(pki.KUBELET_CLIENT)}",
                "--profiling=false",
                "--max-requests-inflight=800",
                "--max-mutating-requests-inflight=400",
            ],
            apiserver_flags,
        ),
    )
    ca_context = ssl.create_default_context(cafile=str(credentials.ca_cert))
    launch.wait_for(
        apiserver,
        lambda: _http_ok(f"https://127.0.0.1:{port}/readyz", context=ca_context),
        timeout=timeout,
        what="ready",
    )

    insecure = _insecure_context()
    for name, extra in (
        (
            "kube-controller-manager",
            [
                "--controllers=*",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={credentials.sa_key}",
                f"--root-ca-file={credentials.ca_cert}",
                f"--cluster-cidr={POD_CIDR}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                *beat.grace_flags(),
            ],
        ),
        ("kube-scheduler", []),
    ):
        component_port = free_port()
        component = launch.start(
            name,
            [
                control_plane,
                name,
                f"--kubeconfig={directory / (name.removeprefix('kube-') + '.kubeconfig')}",
                "--bind-address=127.0.0.1",
                f"--secure-port={component_port}",
                "--leader-elect=false",
                *extra,
            ],
        )
        healthz = f"https://127.0.0.1:{component_port}/healthz"
        launch.wait_for(
            component,
            functools.partial(_http_ok, healthz, context=insecure),
            timeout=timeout,
            what="healthy",
        )

    stages_file = directory / "stages.yaml"
    stages_file.write_text(stages(beat))
    launch.start(
        "kwok",
        [
            str(binaries.kwok),
            f"--kubeconfig={directory / 'kwok.kubeconfig'}",
            f"--config={stages_file}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-label-selector={SIMULATED_LABEL}=true",
            f"--node-lease-duration-seconds={beat.lease_seconds}",
            f"--cidr={POD_CIDR}",
        ],
    )


def restart(
    *,
    directory: Path,
    component: str,
    timeout: float = 120.0,
    flags: dict[str, str] | None = None,
) -> None:
    """Stop one component and start it again as it was started: the tests use it to
    restart kube-apiserver or etcd under the operators. ``flags`` (``{"--name":
    "value"}``) replace or add flags, and stay until a later restart changes them:
    the chaos suite starts an apiserver that throttles, then the one it had.
    Returns once the component is ready again (apiserver ready, etcd healthy)."""
    state = ClusterState.load(directory)
    if state is None:
        raise DevclusterError(f"no devcluster in {directory}")
    process = next((p for p in state.processes if p.name == component), None)
    if process is None or not process.argv:
        raise DevclusterError(f"{component} is not a restartable component of {directory}")
    argv = with_flags(process.argv, flags or {})
    stop_process(process)
    launch = _Launch(state, log=lambda _: None)
    started = launch.start(component, argv)
    ready: Callable[[], bool] | None = None
    if component == "kube-apiserver":
        context = _insecure_context()
        ready = functools.partial(_http_ok, f"{state.server}/readyz", context=context)
    elif component == "etcd":
        client_url = next(a for a in argv if a.startswith("--listen-client-urls="))
        ready = functools.partial(_http_ok, f"{client_url.split('=', 1)[1]}/health")
    if ready is not None:
        launch.wait_for(started, ready, timeout=timeout, what="ready")


def with_flags(argv: list[str], flags: dict[str, str]) -> list[str]:
    """``argv`` with each ``--name=value`` of ``flags`` replacing that flag, or added."""
    kept = [a for a in argv if a.split("=", 1)[0] not in flags]
    return kept + [f"{name}={value}" for name, value in flags.items()]


def down(*, directory: Path, log: Callable[[str], None] = print) -> bool:
    """Stop every process ``up`` started in ``directory`` and remove its state.

    Returns False when there was nothing to stop."""
    directory = directory.resolve()
    state = ClusterState.load(directory)
    if state is None:
        log(f"no devcluster in {directory}")
        return False
    _stop_all(state, log=log)
    shutil.rmtree(directory, ignore_errors=True)
    return True


def node_kubeconfig(*, directory: Path, node: str, out: Path | None = None) -> Path:
    """A kubeconfig with ``node``'s kubelet identity (``system:node:NAME`` in
    ``system:nodes``), signed by the devcluster CA: what root on that node would find.
    The Node authorizer and NodeRestriction judge it as they judge a real kubelet."""
    directory = directory.resolve()
    state = ClusterState.load(directory)
    if state is None:
        raise DevclusterError(f"no devcluster in {directory}: run `pitcrew devcluster up` first")
    credentials = pki.Pki(directory / "pki")
    stem = f"node-{node}"
    pki.issue_client(
        credentials, stem, common_name=f"system:node:{node}", organisation="system:nodes"
    )
    path = out or directory / f"{stem}.kubeconfig"
    write_kubeconfig(path, server=state.server, pki_=credentials, user=stem)
    return path


def status(*, directory: Path) -> dict[str, Any]:
    """Which components run, and where the kubeconfig is."""
    state = ClusterState.load(directory.resolve())
    if state is None:
        return {"running": False, "dir": str(directory.resolve())}
    components = {
        p.name: {"pid": p.pid, "alive": is_alive(p), "log": p.log} for p in state.processes
    }
    return {
        "running": all(c["alive"] for c in components.values()),
        "dir": state.dir,
        "server": state.server,
        "kubeconfig": state.kubeconfig,
        "nodes": state.nodes,
        "gpusPerNode": state.gpus_per_node,
        "gpuModel": state.gpu_model,
        "realNodes": state.real_nodes,
        "components": components,
    }

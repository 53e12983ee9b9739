"""The simulated stack: Pitcrew installed into a cluster, with simulated agents and
operators as real processes.

The demo, the end-to-end tests and the benchmarks all bring Pitcrew up the
same way, through this class, so what the tests prove is what the demo shows
and what the benchmarks measure:

1. :meth:`SimStack.install` applies the CRDs, the namespace, and the RBAC
   and admission policy the chart ships (:mod:`pitcrew.deploy`), then writes a
   kubeconfig with the ``pitcrew-operator`` ServiceAccount's token. The
   operator never runs as cluster-admin here, so a missing permission fails
   here as it would in production.
2. :meth:`start_sim_agents` runs ``pitcrew sim-agents`` (one process playing
   the node agent of every simulated node) and :meth:`start_operator` runs
   ``pitcrew operator``, each a separate process with its log in the stack's
   folder, as they run in a cluster: separate address spaces, real watches,
   leader election over a real Lease.

:meth:`SimStack.devcluster` brings up a dev cluster for the stack to run in and
takes it down with everything the stack started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from kubernetes import client

from gpuhealth.models import GpuModel, get_model
from pitcrew.api.vocabulary import DEFAULT_NAMESPACE, SIMULATED_LABEL, account_name
from pitcrew.dev import devcluster
from pitcrew.dev.agents import AGENT_POD_LABEL
from pitcrew.dev.devcluster import install
from pitcrew.dev.devcluster.cluster import free_port
from pitcrew.kube.client import api_client

NAMESPACE = DEFAULT_NAMESPACE
"""Where the operator's Lease, probe Jobs and remediation Jobs live."""


class SimStack:
    def __init__(self, *, directory: Path, kubeconfig: str, namespace: str = NAMESPACE) -> None:
        self.directory = directory
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.api = api_client(kubeconfig)
        self.operator_kubeconfig = directory / "operator.kubeconfig"
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.metrics_ports: dict[str, int] = {}
        """Metrics port of each process that serves one, stable across restarts."""

    @classmethod
    @contextlib.contextmanager
    def devcluster(
        cls,
        *,
        directory: Path,
        nodes: int,
        model: GpuModel | None = None,
        timeout: float = 180.0,
        apiserver_flags: dict[str, str] | None = None,
        beat: devcluster.Heartbeats | None = None,
        log: Callable[[str], None] = print,
    ) -> Iterator[SimStack]:
        """A dev cluster of ``nodes`` simulated GPU nodes with Pitcrew installed; on exit
        every process the stack started is stopped and the cluster taken down."""
        directory.mkdir(parents=True, exist_ok=True)
        state = devcluster.up(
            directory=directory / "cluster",
            node_count=nodes,
            gpus_per_node=8,
            model=model or get_model("H100"),
            timeout=timeout,
            apiserver_flags=apiserver_flags,
            beat=beat,
            log=log,
        )
        stack = cls(directory=directory, kubeconfig=state.kubeconfig)
        try:
            stack.install()
            yield stack
        finally:
            stack.stop_all()
            devcluster.down(directory=directory / "cluster", log=lambda _: None)

    def install(self) -> None:
        """CRDs, namespace, RBAC and admission as the chart ships them; the operator's
        ServiceAccount kubeconfig."""
        install.install(self.api, namespace=self.namespace)
        install.service_account_kubeconfig(
            self.api,
            component="operator",
            namespace=self.namespace,
            path=self.operator_kubeconfig,
        )

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def metrics_port(self, name: str) -> int:
        return self.metrics_ports.setdefault(name, free_port())

    def start(
        self, name: str, *args: str, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """``pitcrew <args>`` as a process named ``name``, its output in ``<name>.log``,
        with ``env`` added to this process's environment."""
        log = (self.directory / f"{name}.log").open("ab")
        process = subprocess.Popen(
            [sys.executable, "-m", "pitcrew.cli", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
        )
        self.running[name] = process
        return process

    def start_sim_agents(
        self,
        *,
        interval: str = "2s",
        heartbeat: str = "30s",
        metrics: bool = True,
        agent_credentials: bool = True,
    ) -> subprocess.Popen[bytes]:
        """The simulated agents. Kubelets and machines (boot IDs, reboots, termination
        messages) act with admin credentials, as they are not Pitcrew; probe reports go
        out with the probe ServiceAccount's token bound to the probe pod (the admission
        policy keeps it to its own node's GPUNode); with ``agent_credentials`` each node's
        agent writes with the agent ServiceAccount's token bound to that node's agent
        pod (a DaemonSet kwok runs), so the admission policy that binds an agent to its
        own node holds here as in the chart. Benchmarks of thousands of nodes turn it
        off: a pod and a token per node would be part of what they measure."""
        if agent_credentials:
            self._agent_daemonset()
        args = [
            "--kubeconfig",
            self.kubeconfig,
            "--probe-account",
            account_name("probe"),
            *(
                ["--agent-account", account_name("agent"), "--agent-namespace", self.namespace]
                if agent_credentials
                else []
            ),
            "--interval",
            interval,
            "--heartbeat",
            heartbeat,
        ]
        if metrics:
            args += ["--metrics-port", str(self.metrics_port("sim-agents"))]
        return self.start("sim-agents", "sim-agents", *args)

    def _agent_daemonset(self) -> None:
        """The agent DaemonSet of the simulated fleet: kwok runs a pod of the agent's
        ServiceAccount on every simulated node (a real DaemonSet's pods: never evicted
        by a drain), and the simulated agent of each node writes with its token."""
        body: dict[str, Any] = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "pitcrew-sim-agent", "namespace": self.namespace},
            "spec": {
                "selector": {"matchLabels": {AGENT_POD_LABEL: "true"}},
                "template": {
                    "metadata": {"labels": {AGENT_POD_LABEL: "true"}},
                    "spec": {
                        "serviceAccountName": account_name("agent"),
                        "nodeSelector": {SIMULATED_LABEL: "true"},
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": "agent", "image": "pitcrew:simulated"}],
                    },
                },
            },
        }
        try:
            client.AppsV1Api(self.api).create_namespaced_daemon_set(
                self.namespace, client.V1DaemonSet.model_validate(body)
            )
        except client.ApiException as error:
            if error.status != 409:
                raise

    def start_operator(
        self,
        identity: str = "operator",
        *,
        resync: str = "2",
        lease_seconds: int = 4,
        kubeconfig: Path | None = None,
        extra: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """The operator as its ServiceAccount; ``kubeconfig`` for another way to the
        apiserver with the same credentials (the chaos suite's proxy); ``extra``
        arguments and ``env`` (Slurm's client and its configuration)."""
        return self.start(
            identity,
            "operator",
            "--kubeconfig",
            str(kubeconfig or self.operator_kubeconfig),
            "--namespace",
            self.namespace,
            "--identity",
            identity,
            "--lease-seconds",
            str(lease_seconds),
            "--resync-seconds",
            resync,
            "--metrics-port",
            str(self.metrics_port(identity)),
            "--health-port",
            "0",
            *extra,
            env=env,
        )

    def kill(self, name: str) -> None:
        """SIGKILL: the process dies mid-work, as a node or a pod does."""
        process = self.running.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)

    def stop_all(self) -> None:
        for name in list(self.running):
            process = self.running.pop(name)
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()

    def log(self, name: str) -> str:
        return (self.directory / f"{name}.log").read_text(errors="replace")

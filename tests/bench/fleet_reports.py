"""Agent reports for a benchmark fleet, written as each node's agent writes them.

A real fleet has one agent per node: a fault on a node is one server-side
apply of that node's GPUNode status, by ``pitcrew-agent``, the instant its
agent sees the XID. Simulating thousands of agents in one process puts that
process's queue into every latency measured; :class:`FleetReports` writes the
same apply directly, so what a benchmark measures is apiserver, watch,
decision and cordon.

The bodies are what the real agent code produces: a passive sweep of a
simulated 8-GPU H100 by the real :class:`~gpuhealth.runner.Checker`, turned
into status fields by :func:`pitcrew.node.agent.agent_status`, once healthy and
once with a fatal XID 79. Each write stamps its own report and heartbeat time.
Heartbeats go out at the policy's rate, spread over the interval, as the agents'
own timers spread them: a fleet of 10,000 at a 5-minute heartbeat writes 33 a
second, and each is a watch event the operator decides.
"""

from __future__ import annotations

import copy
import datetime
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client

from gpuhealth.backends.sim import SimBackend
from gpuhealth.checks import Expectations
from gpuhealth.faults import parse_faults
from gpuhealth.models import get_model
from gpuhealth.runner import Checker
from pitcrew.api.vocabulary import AGENT_MANAGER
from pitcrew.kube import gpunodes
from pitcrew.kube.client import list_all
from pitcrew.node.agent import agent_status

NODES = "/api/v1/nodes"
FATAL_XID = '[{"type": "xid", "gpu": 0, "code": 79}]'


def agent_fields(*, faults: str = "") -> dict[str, Any]:
    """The status fields an agent applies after one sweep of a simulated H100 node."""
    backend = SimBackend(node="bench", model=get_model("H100"), gpus=8)
    checker = Checker(
        backend=backend,
        node="bench",
        expect=Expectations(gpus=8, model=backend.model, ib_ports=8),
    )
    if faults:
        backend.set_faults(parse_faults(faults))
    status = agent_status(checker.run(), checker)
    return gpunodes.status_fields(status, gpunodes.AGENT_FIELDS)


class FleetReports:
    def __init__(self, api: client.ApiClient, nodes: list[str], *, heartbeat: float) -> None:
        self.api = api
        self.nodes = nodes
        self.heartbeat = heartbeat
        self.healthy = agent_fields()
        self.failing = agent_fields(faults=FATAL_XID)
        self.failed: set[str] = set()
        self.answered: dict[str, float] = {}
        """When the apiserver answered each node's last report (Unix seconds)."""
        self.written = 0
        self._stop = threading.Event()
        self._writing = {node: threading.Lock() for node in nodes}
        """One write at a time per node, as one agent makes them: a heartbeat built
        just before the fault and answered after the fault's report would put the
        node back to healthy for a whole heartbeat period (a 300 s outlier in a
        375-fault burst before this lock)."""

    def _body(self, failing: bool) -> dict[str, Any]:
        body = copy.deepcopy(self.failing if failing else self.healthy)
        now = datetime.datetime.now(datetime.UTC).isoformat()
        body["checks"]["reportTime"] = now
        body["lastHeartbeat"] = now
        return body

    def write(self, node: str, *, failing: bool = False) -> float:
        """One agent report for ``node``; returns the Unix time it was asked for."""
        sent = time.time()  # the fault: a wait for the node's previous write counts
        with self._writing[node]:
            if failing:
                self.failed.add(node)
            body = self._body(failing or node in self.failed)
            gpunodes.apply_status(self.api, node=node, status=body, manager=AGENT_MANAGER)
            self.answered[node] = time.time()
        self.written += 1
        return sent

    def first(self, workers: int = 16) -> None:
        """Every node's first report (creating its GPUNode if the operator has not)."""

        uids = {n["metadata"]["name"]: n["metadata"]["uid"] for n in list_all(self.api, NODES)}

        def one(node: str) -> None:
            try:
                self.write(node)
            except client.ApiException as error:
                if error.status != 404:
                    raise
                # The operator has not created it yet: as the agent does, create it.
                gpunodes.ensure(self.api, node=node, node_uid=uids[node])
                self.write(node)

        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(one, self.nodes))

    def start_heartbeats(self, workers: int = 16) -> None:
        """Each node's heartbeat once per ``heartbeat`` seconds, evenly spread, sent by
        ``workers`` threads on schedule: one thread waiting for each answer keeps up
        with a 5-minute heartbeat only while the apiserver answers in 30 ms, and at
        10,000 nodes on this machine it answers in about 500 ms."""
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bench-heartbeat")
        threading.Thread(target=self._beat, args=(pool,), daemon=True).start()

    def _beat(self, pool: ThreadPoolExecutor) -> None:
        gap = self.heartbeat / max(1, len(self.nodes))
        in_flight: set[str] = set()
        lock = threading.Lock()

        def one(node: str) -> None:
            try:
                self.write(node)
            except Exception as error:  # a heartbeat lost is one a real agent retries
                print(f"heartbeat of {node} failed: {error}", flush=True)
            finally:
                with lock:
                    in_flight.discard(node)

        due = time.monotonic()
        while not self._stop.is_set():
            for node in self.nodes:
                with lock:
                    late = node in in_flight  # its last beat is still unanswered: skip
                    if not late:
                        in_flight.add(node)
                if not late:
                    pool.submit(one, node)
                due += gap
                if self._stop.wait(max(0.0, due - time.monotonic())):
                    pool.shutdown(wait=False, cancel_futures=True)
                    return

    def stop(self) -> None:
        self._stop.set()

"""Fakes for the operator's shell: a cluster that records every write, an Event
sink, remediators, and worker pools that run plans at once or hold them."""

from __future__ import annotations

import copy
import datetime
import itertools
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future
from typing import Any

import jsonpatch

from gpuhealth.report import CheckResult, CheckStatus, FaultClass, RecommendedAction
from pitcrew.api.gpunode import ChecksStatus, GPUNodeStatus, Phase
from pitcrew.api.policy import RemediationAction
from pitcrew.api.settings import LeaderSettings, OperatorSettings
from pitcrew.api.vocabulary import GPU_RESOURCE, RESTART_REQUESTED_ANNOTATION
from pitcrew.controller.executor import Executor as PlanExecutor
from pitcrew.controller.lanes import Pool
from pitcrew.controller.policy_status import PolicyStatusWriter
from pitcrew.controller.rounds import RoundLoop
from pitcrew.controller.slurm import SlurmWatch
from pitcrew.controller.store import Store
from pitcrew.core import node_edits
from pitcrew.core.convert import node_view
from pitcrew.core.node_edits import NodeAction
from pitcrew.core.port_types import Backoff, EvictionResult, Ref
from pitcrew.core.views import PodView
from pitcrew.kube import nodes
from pitcrew.remediators import RemediationError, RemediationRequest, Remediator
from support.lifecycle_data import POLICY_CREATED, SELECTOR, T0

Object = dict[str, Any]
_versions = itertools.count(100)


def version() -> str:
    return str(next(_versions))


class InlinePool(Executor):
    """Runs each submitted call at once: a plan is done when ``submit`` returns."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as error:
            future.set_exception(error)
        return future

    submit_first = submit


class HeldPool(Executor):
    """Holds submitted calls until :meth:`release`: plans stay in flight. A release
    runs the first lane's calls (cordons) before the others, as
    :class:`~pitcrew.controller.lanes.Lanes` does with work that waits."""

    def __init__(self) -> None:
        self.held: list[tuple[Future[Any], Callable[[], Any]]] = []
        self.held_first: list[tuple[Future[Any], Callable[[], Any]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self.held.append((future, lambda: fn(*args, **kwargs)))
        return future

    def submit_first(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self.held_first.append((future, lambda: fn(*args, **kwargs)))
        return future

    def release(self) -> None:
        """Run what is held, first lane first, and what those calls submit after it,
        until nothing is held."""
        while self.held_first or self.held:
            held, self.held_first, self.held = [*self.held_first, *self.held], [], []
            for future, call in held:
                future.set_result(call())


class FakeCluster:
    """Records every write; node edits and status applies come back as the apiserver
    would return them (a new resourceVersion), so the store takes them."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.calls: list[tuple[str, Any]] = []
        self.gpunode_statuses: dict[str, list[Object]] = {}
        self.policy_statuses: dict[str, list[Object]] = {}
        self.objects: dict[str, dict[str, Object]] = {}
        """What the apiserver holds, by kind and name: what a list returns."""
        self.node_images: dict[str, list[str]] = {}
        """Image names each Node's kubelet reports (``status.images``), by node."""

    def list_objects(self, kind: str) -> list[Object]:
        self.calls.append(("list_objects", kind))
        return [copy.deepcopy(o) for o in self.objects.get(kind, {}).values()]

    def ensure_gpunode(self, *, node: str, node_uid: str) -> Object | None:
        self.calls.append(("ensure_gpunode", node))
        if node in self.objects.get("gpunode", {}):
            return None
        created = gpunode(node, None)
        self.objects.setdefault("gpunode", {})[node] = created
        return created

    def edit_node(
        self, node: str, action: NodeAction, *, known: Object | None = None
    ) -> Object | None:
        """The production edit and JSON patch, applied as the apiserver would."""
        self.calls.append(("edit_node", (node, type(action).__name__)))
        current = self.store.nodes[node]
        edit = node_edits.plan(node_view(current), action)
        if edit is None:
            return None
        patched: Object = jsonpatch.apply_patch(current, nodes._patch(current, edit))
        patched["metadata"]["resourceVersion"] = version()
        return patched

    def annotate_node(self, node: str, annotations: dict[str, str | None]) -> None:
        self.calls.append(("annotate_node", (node, dict(annotations))))

    def evict(
        self,
        pods: Iterable[PodView],
        *,
        backoff: Backoff,
        now: datetime.datetime,
        parallelism: int,
    ) -> EvictionResult:
        keys = [p.key for p in pods]
        self.calls.append(("evict", keys))
        return EvictionResult(evicted=keys)

    def force_delete(
        self, pods: Iterable[PodView], *, grace_seconds: int | None = None
    ) -> list[str]:
        keys = [p.key for p in pods]
        self.calls.append(("force_delete", keys))
        return keys

    def tolerate(self, pods: Iterable[PodView], *, taint: str, value: str) -> list[str]:
        keys = [p.key for p in pods]
        self.calls.append(("tolerate", (keys, taint, value)))
        return keys

    def request_restart(self, pods: Iterable[tuple[str, str, str]], *, value: str) -> list[str]:
        """Records the request and puts each pod back annotated, as its watch would."""
        keys = [f"{namespace}/{name}" for namespace, name, _ in pods]
        self.calls.append(("request_restart", (keys, value)))
        for key in keys:
            pod = copy.deepcopy(self.store.pods[key])
            pod["metadata"].setdefault("annotations", {})[RESTART_REQUESTED_ANNOTATION] = value
            pod["metadata"]["resourceVersion"] = version()
            self.store.put("pod", pod)
        return keys

    def create_job(self, job: Object) -> bool:
        self.calls.append(("create_job", job["metadata"]["name"]))
        return True

    def delete_job(self, *, namespace: str, name: str) -> bool:
        self.calls.append(("delete_job", name))
        return True

    def apply_gpunode_status(self, *, node: str, status: Object) -> Object:
        self.calls.append(("apply_gpunode_status", node))
        self.gpunode_statuses.setdefault(node, []).append(status)
        written = copy.deepcopy(self.store.gpunode(node) or gpunode(node, None))
        # Server-side apply: a field the operator owned and left out is removed; the
        # agent's and the probe's fields stay.
        others = {"checks", "gpus", "gpuCount", "healthyGpus", "lastHeartbeat", "probe", "images"}
        kept = {k: v for k, v in (written.get("status") or {}).items() if k in others}
        written["status"] = {**kept, **status}
        written["metadata"]["resourceVersion"] = version()
        return written

    def apply_gpunode_images(self, *, node: str, images: list[str]) -> Object:
        self.calls.append(("apply_gpunode_images", (node, list(images))))
        written = copy.deepcopy(self.store.gpunode(node) or gpunode(node, None))
        written["status"] = {**(written.get("status") or {}), "images": list(images)}
        written["metadata"]["resourceVersion"] = version()
        return written

    def read_node(self, name: str) -> Object | None:
        """The Node with the images its kubelet reports (:attr:`node_images`)."""
        node = copy.deepcopy(self.store.nodes.get(name))
        if node is not None:
            node.setdefault("status", {})["images"] = [
                {"names": [i], "sizeBytes": 1} for i in self.node_images.get(name, [])
            ]
        return node

    def create_pod(self, pod: Object) -> bool:
        self.calls.append(("create_pod", pod))
        return True

    def delete_pod(self, *, namespace: str, name: str) -> bool:
        self.calls.append(("delete_pod", f"{namespace}/{name}"))
        return True

    def publish_checks(self, *, node: str, checks: Object) -> Object:
        self.calls.append(("publish_checks", node))
        written = copy.deepcopy(self.store.gpunode(node) or gpunode(node, None))
        written["spec"] = {**(written.get("spec") or {}), "checks": checks}
        written["metadata"]["resourceVersion"] = version()
        self.objects.setdefault("gpunode", {})[node] = written
        return written

    def apply_policy_status(self, *, name: str, status: Object) -> Object:
        self.calls.append(("apply_policy_status", name))
        self.policy_statuses.setdefault(name, []).append(status)
        written = copy.deepcopy(self.store.policies[name])
        written["status"] = status
        written["metadata"]["resourceVersion"] = version()
        return written

    def writes(self, kind: str) -> list[Any]:
        return [arg for name, arg in self.calls if name == kind]


class FakeEvents:
    def __init__(self) -> None:
        self.posted: list[tuple[Ref, str, str, bool]] = []

    def emit(self, ref: Ref, *, reason: str, message: str, warning: bool = False) -> None:
        self.posted.append((ref, reason, message, warning))

    def reasons(self, kind: str | None = None) -> list[str]:
        return [r for ref, r, _, _ in self.posted if kind is None or ref.kind == kind]


class FakeRemediator:
    """Starts nothing; records each request and what the status said at that moment."""

    def __init__(self, cluster: FakeCluster, *, fails: str | None = None) -> None:
        self.cluster = cluster
        self.fails = fails
        self.requests: list[RemediationRequest] = []
        self.intent_at_start: list[Object | None] = []

    def start(self, request: RemediationRequest) -> str:
        self.requests.append(request)
        written = self.cluster.gpunode_statuses.get(request.node) or [None]
        self.intent_at_start.append((written[-1] or {}).get("remediation"))
        if self.fails:
            raise RemediationError(self.fails)
        return f"started {request.action} on {request.node}"


def node_object(name: str, *, gpus: int = 8) -> Object:
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": version(),
            "creationTimestamp": (POLICY_CREATED - datetime.timedelta(days=1)).isoformat(),
            "labels": dict(SELECTOR["matchLabels"]),
        },
        "spec": {},
        "status": {
            "capacity": {GPU_RESOURCE: str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def healthy_status(*, fault: FaultClass | None = None, at: datetime.datetime = T0) -> GPUNodeStatus:
    results = [CheckResult(name="gpu-count", status=CheckStatus.PASS)]
    if fault is not None:
        results.append(
            CheckResult(
                name="xid",
                status=CheckStatus.FAIL,
                gpu=0,
                fault_class=fault,
                action=RecommendedAction.RESET_GPU,
                message=f"xid {fault}",
            )
        )
    checks = ChecksStatus(report_time=at, backend="sim", suite="passive", results=results)
    return GPUNodeStatus(phase=Phase.HEALTHY, phase_since=at, checks=checks, last_heartbeat=at)


def gpunode(name: str, status: GPUNodeStatus | None) -> Object:
    obj: Object = {
        "metadata": {
            "name": name,
            "uid": f"gpu-uid-{name}",
            "resourceVersion": version(),
            "generation": 1,
        },
        "spec": {"nodeName": name},
    }
    if status is not None:
        obj["status"] = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    return obj


def policy_object(**spec: Any) -> Object:
    return {
        "metadata": {
            "name": "fleet",
            "uid": "policy-uid",
            "generation": 1,
            "resourceVersion": version(),
            "creationTimestamp": POLICY_CREATED.isoformat(),
        },
        "spec": {"nodeSelector": SELECTOR, **spec},
    }


class NoRuns:
    def active(self) -> bool:
        return False

    def step(self, now: datetime.datetime) -> None:
        raise AssertionError("no ValidationRun in these tests")

    def run_deleted(self) -> None:
        raise AssertionError("no ValidationRun in these tests")


class Led:
    """The shards a fake replica leads: pools by name (None: all), the cluster shard;
    and the pools it was last told to campaign for."""

    def __init__(self) -> None:
        self.pools: set[str] | None = None
        self.cluster = True
        self.campaigned: tuple[str, ...] = ()

    def leads_pool(self, policy: str) -> bool:
        return self.pools is None or policy in self.pools

    def leads_cluster(self) -> bool:
        return self.cluster

    def campaign(self, pools: Iterable[str]) -> None:
        self.campaigned = tuple(sorted(pools))


class Shell:
    """The round loop, executor and policy-status writer wired to fakes, as the
    operator wires them to the Kubernetes API."""

    def __init__(
        self,
        *,
        nodes: dict[str, GPUNodeStatus | None],
        policy: Object,
        pool: Pool | None = None,
        remediator_fails: str | None = None,
        dry_run: bool = False,
        now: datetime.datetime = T0,
        slurm: SlurmWatch | None = None,
        identity: str = "",
    ) -> None:
        self.now = now
        self.leading = True
        """Whether the process's Leases are renewed (the executor's tenure)."""
        self.leadership = Led()
        self.store = Store()
        self.cluster = FakeCluster(self.store)
        self.events = FakeEvents()
        self.remediator = FakeRemediator(self.cluster, fails=remediator_fails)
        self.requeued: list[tuple[str, float]] = []
        self.pool = pool or InlinePool()
        settings = OperatorSettings(
            dry_run=dry_run, leader=LeaderSettings(election=False, identity=identity)
        )
        remediators: dict[RemediationAction, Remediator] = dict.fromkeys(
            RemediationAction, self.remediator
        )
        self.executor = PlanExecutor(
            cluster=self.cluster,
            store=self.store,
            events=self.events,
            remediators=remediators,
            remediation_pool=InlinePool(),
            settings=settings,
            clock=lambda: self.now,
            requeue=lambda node, seconds: self.requeued.append((node, seconds)),
            leading=lambda pool: self.leading and self.leadership.leads_pool(pool),
            slurm=slurm,
        )
        self.policy_status = PolicyStatusWriter(
            cluster=self.cluster,
            store=self.store,
            events=self.events,
            goodput=lambda pool, windows, now: [{"window": str(w)} for w in windows],
        )
        self.rounds = RoundLoop(
            store=self.store,
            cluster=self.cluster,
            executor=self.executor,
            policy_status=self.policy_status,
            runs=NoRuns(),
            pool=self.pool,
            settings=settings,
            clock=lambda: self.now,
            slurm=slurm,
            leadership=self.leadership,
        )
        objects = self.cluster.objects
        objects["policy"] = {"fleet": policy}
        for name, status in nodes.items():
            objects.setdefault("node", {})[name] = node_object(name)
            if status is not None:
                objects.setdefault("gpunode", {})[name] = gpunode(name, status)
        self.rounds.prime()
        self.cluster.calls.clear()

    def round(self, *names: str) -> list[Any]:
        """Decide ``names`` (default: every node) and launch the plans, as one round."""
        plans, _ = self.rounds.plan(names or sorted(self.store.nodes), self.now)
        for plan in plans:
            self.rounds.launch(plan)
        return plans

    def settle(self) -> None:
        """Rounds until nothing changes: the fleet as the operator keeps it."""
        pool, self.rounds.pool = self.rounds.pool, InlinePool()
        for _ in range(5):
            if not self.round():
                break
        self.rounds.pool = pool

    def fail(self, name: str, fault: FaultClass = FaultClass.FATAL) -> None:
        """The node's agent reports a fault (its fields of the status only)."""
        written = copy.deepcopy(self.store.gpunode(name))
        assert written is not None
        report = healthy_status(fault=fault, at=self.now)
        written["status"]["checks"] = report.model_dump(mode="json", by_alias=True)["checks"]
        written["metadata"]["resourceVersion"] = version()
        self.store.put("gpunode", written)

    def release(self, name: str) -> bool:
        """The node's agent closed NVML for the reset rung the operator recorded, and
        says so (``checks.released``); False when no rung awaits its release."""
        rung = self.store.status(name).remediation
        if rung is None or not rung.awaiting_release:
            return False
        written = copy.deepcopy(self.store.gpunode(name))
        assert written is not None
        written["status"]["checks"]["released"] = rung.reference
        written["metadata"]["resourceVersion"] = version()
        self.store.put("gpunode", written)
        return True

    def phase(self, name: str) -> Phase:
        return self.store.status(name).phase

"""The operator's in-memory view of the cluster, fed by watch events.

kopf's ``on.event`` handlers put every Node, Pod, GPUNode and policy they
see here; the round loop reads only from here, so a decision never waits on
an API read. Events can arrive late or out of order relative to the
operator's own writes: an object whose ``resourceVersion`` is older than the
one already stored (from a write's response) is ignored, so a stale event
never makes the operator forget what it just did.

Everything derived from an object (its parsed status, the policies a Node
matches) is computed once per ``resourceVersion``: the fleet summary that
every decision needs walks all nodes, and at thousands of nodes it must be
a walk over cached tuples, not over parsing and label matching.

What is kept is what decisions read (:func:`kept`), and a GPUNode's status is
kept packed, with a :class:`~pitcrew.core.fleet.Summary` per node and the last
used parsed statuses beside it: at 4,000 nodes the store holds about 50 MiB
where full objects and parsed statuses held over 500 (design record 008).
"""

from __future__ import annotations

import datetime
import json
import logging
import zlib
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from pitcrew.api.gpunode import AgentChecks, GPUNodeStatus, Phase
from pitcrew.api.vocabulary import CHECKPOINT_ANNOTATION, RESERVED_TAINT, SPARE_TAINT
from pitcrew.core.budgets import Budget, budget
from pitcrew.core.convert import (
    EPOCH,
    UnreadableStatusError,
    gpunode_status,
    matches,
    object_key,
    policy_view,
    published_checks,
    reservation_job,
    training_job,
    waits_for_capacity,
)
from pitcrew.core.fleet import Summary, counted_in_fleet, summarize
from pitcrew.core.maintenance import Window, node_maintenance, window
from pitcrew.core.views import PolicyView

logger = logging.getLogger(__name__)
Object = dict[str, Any]
PARSED_KEPT = 256
"""Parsed GPUNode statuses kept, the most recently used: a decision parses its node's
status once per version; the fleet view reads only each node's :class:`Summary`."""
DEPARTED_MAX = 10_000
"""Deleted training pods kept between two accountant ticks, at most (a mass deletion
beyond it loses only the stop times of the rest, never a pod still running)."""


DISRUPTED_KEPT = 4096
"""Pod names remembered per PodDisruptionBudget from its ``disruptedPods``, the oldest
forgotten first: twice the 2,000 the apiserver lets one budget list at once."""

NODE_STATUS_KEPT = frozenset({"conditions", "capacity", "allocatable", "addresses"})
"""What the operator reads of a Node's status (and ``nodeInfo.bootID``): a GPU node's
image list alone can outweigh everything else Pitcrew keeps of it."""


def kept(kind: str, obj: Object) -> Object:
    """``obj`` without what no decision reads: ``managedFields`` of every object (a
    GPUNode's lists each field of every check result, by manager: most of its size),
    and of a Node's status all but :data:`NODE_STATUS_KEPT` and its boot ID. A new
    dict: the caller's object is not changed."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    status = obj.get("status")
    if kind == "node" and isinstance(status, dict):
        slim = {k: v for k, v in status.items() if k in NODE_STATUS_KEPT}
        boot = (status.get("nodeInfo") or {}).get("bootID")
        if boot:
            slim["nodeInfo"] = {"bootID": boot}
        obj = {**obj, "status": slim}
    return obj


def decided_by(node: Object) -> tuple[Any, ...]:
    """What of a Node a decision reads (:func:`~pitcrew.core.convert.node_view`): a
    kubelet rewrites its status every few minutes with new heartbeat times only, and
    at 10,000 nodes those writes are 30 a second that need no decision."""
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    ready = [c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    return (
        meta.get("labels"),
        meta.get("annotations"),
        meta.get("creationTimestamp"),
        node.get("spec"),
        ready,
        status.get("capacity"),
        (status.get("nodeInfo") or {}).get("bootID"),
    )


def _spec_of(obj: Object | None) -> Any:
    return None if obj is None else obj.get("spec")


def _version(obj: Object) -> int | None:
    try:
        return int(obj.get("metadata", {}).get("resourceVersion", ""))
    except ValueError:
        return None


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Store:
    def __init__(self, *, clock: Callable[[], datetime.datetime] = _utc_now) -> None:
        self.clock = clock
        """The operator's clock: what dates the checkpoints it sees."""
        self.nodes: dict[str, Object] = {}
        self.gpunodes: dict[str, Object] = {}
        self.policies: dict[str, Object] = {}
        self.runs: dict[str, Object] = {}
        self.windows: dict[str, Object] = {}
        """MaintenanceWindows, by name."""
        self.budgets: dict[str, Object] = {}
        """PodDisruptionBudgets, by ``namespace/name``: a drain asks only for the
        evictions they allow (:mod:`pitcrew.core.budgets`)."""
        self._budgets: dict[str, tuple[Any, Budget | None]] = {}
        self._disrupted: dict[str, OrderedDict[str, int]] = {}
        self.node_maintenances: dict[str, Object] = {}
        """medik8s NodeMaintenances, by name (polled: the API may not exist)."""
        self.maintenance_problem = ""
        self.job_size_problem = ""
        """Why some training jobs' sizes cannot be read as they should (a launcher's
        version no longer served), for the policies' ``JobSizes`` condition."""
        """Why NodeMaintenances cannot be read as they should (a version no longer
        served, no permission; those last read are kept); empty when they can."""
        self._windows: dict[tuple[str, str, Any], Window | None] = {}
        self.pods: dict[str, Object] = {}
        self.pods_by_node: dict[str, dict[str, Object]] = defaultdict(dict)
        self.unscheduled: dict[str, Object] = {}
        """Pods on no node yet (Pending), by ``namespace/name``: among them, the pods of a
        job a spare is reserved for."""
        self.reserved: dict[str, str] = {}
        """Nodes reserved for a training job, with the job (``pitcrew.dev/reserved``)."""
        self.spares: set[str] = set()
        """Nodes held as spares (``pitcrew.dev/spare``): a training pod that waits for
        capacity is news to them (a spare may be lent to its job)."""
        self.capacity_waiting: dict[str, Object] = {}
        """Of :attr:`unscheduled`, the training jobs' pods the scheduler found no node
        for (:func:`~pitcrew.core.convert.waits_for_capacity`), by ``namespace/name``."""
        self.departed: dict[str, Object] = {}
        """Training pods (``pitcrew.dev/job``) deleted since the accountant last took
        them (:meth:`take_departed`), by UID, as last seen: when a pod stopped is
        evidence the job ledger needs even after the pod is gone."""
        self.stragglers: dict[str, str] = {}
        """Nodes their jobs' reports name the straggler, with why (the accountant
        keeps it, :mod:`pitcrew.core.stragglers`)."""
        self.hangs: dict[str, str] = {}
        """Nodes a hung job is blamed on, with why (:mod:`pitcrew.controller.hangs`)."""
        self.job_checkpoints: dict[str, datetime.datetime] = {}
        """Each training job's last checkpoint (``namespace/job``), from rank 0's
        progress report: every rank's pod checkpointed then, though only rank 0 says so.
        Dated by the operator's clock when it first saw it (the accountant)."""
        self.checkpoints_seen: dict[str, datetime.datetime] = {}
        """Per pod (``namespace/name``), when its ``pitcrew.dev/checkpoint-at`` annotation
        last changed, by the operator's clock; :data:`~pitcrew.core.convert.EPOCH` for a
        value it already had when first seen. The annotation's own time is the node's
        clock, compared with nothing but itself (:meth:`_put_pod`)."""
        self._packed: dict[str, bytes] = {}
        """Each GPUNode's status as compressed JSON: a parsed status with 15 check
        results is about 100 KB of Python objects, its JSON under 2 KB compressed."""
        self._summaries: dict[str, tuple[Any, Summary, str]] = {}
        self._statuses: OrderedDict[str, tuple[Any, GPUNodeStatus]] = OrderedDict()
        self._policies: dict[str, tuple[Any, PolicyView | None, str]] = {}
        self._matched: dict[str, tuple[Any, int, tuple[str, ...]]] = {}
        self._checks: dict[str, tuple[Any, AgentChecks | None]] = {}
        self._policy_epoch = 0
        """Bumped on any policy change: every node's match is recomputed."""
        self.fleet_changed: set[str] = set()
        """Nodes whose place in a pool's fleet may have changed (membership, phase,
        breaker refusal, verification, phase start) since the round loop last took them
        (:meth:`take_fleet_changes`): it counts those again and no other, so a round of
        heartbeats costs no count at all and a burst's status writes one node each."""

    def gpunode(self, name: str) -> Object | None:
        """GPUNode ``name`` as last seen, status included (unpacked: a copy)."""
        obj = self.gpunodes.get(name)
        packed = self._packed.get(name)
        if obj is None or packed is None:
            return obj
        return {**obj, "status": json.loads(zlib.decompress(packed))}

    def _parse(self, name: str, full: Object | None = None) -> tuple[Any, GPUNodeStatus, str]:
        """The stored status of ``name`` parsed, and why it does not parse (empty if
        it does): from ``full``, the object just stored with its status, or else from
        its packed JSON (a heartbeat's status is parsed once, not packed, unpacked and
        decoded again first)."""
        version = self.gpunodes.get(name, {}).get("metadata", {}).get("resourceVersion")
        try:
            return version, gpunode_status(full or self.gpunode(name)), ""
        except UnreadableStatusError as error:
            return version, GPUNodeStatus(), str(error)

    def status(self, name: str) -> GPUNodeStatus:
        """The parsed status of GPUNode ``name``, parsed once per resourceVersion while
        it is among the :data:`PARSED_KEPT` last used. Check :meth:`unreadable` first:
        an unreadable status reads as empty here."""
        version = self.gpunodes.get(name, {}).get("metadata", {}).get("resourceVersion")
        cached = self._statuses.get(name)
        if cached is not None and cached[0] == version:
            self._statuses.move_to_end(name)
            return cached[1]
        version, status, _ = self._parse(name)
        self._keep_parsed(name, version, status)
        return status

    def _keep_parsed(self, name: str, version: Any, status: GPUNodeStatus) -> None:
        self._statuses[name] = (version, status)
        self._statuses.move_to_end(name)
        if len(self._statuses) > PARSED_KEPT:
            self._statuses.popitem(last=False)

    def _summarized(self, name: str, full: Object | None = None) -> tuple[Any, Summary, str]:
        obj = self.gpunodes.get(name)
        version = (obj or {}).get("metadata", {}).get("resourceVersion")
        cached = self._summaries.get(name)
        if cached is None or cached[0] != version:
            _, status, problem = self._parse(name, full)
            if problem:
                # Counted in the fleet with the phase it says it is in, if any, so
                # the breaker still sees a Draining node whose status went bad.
                raw = str(((full or self.gpunode(name) or {}).get("status") or {}).get("phase"))
                phase = Phase(raw) if raw in set(Phase) else Phase.PENDING
                summary = Summary(phase, False, None, None)
            else:
                summary = summarize(status)
                self._keep_parsed(name, version, status)
            cached = (version, summary, problem)
            self._summaries[name] = cached
        return cached

    def published_checks(self, name: str) -> AgentChecks | None:
        """:func:`~pitcrew.core.convert.published_checks` of GPUNode ``name``, parsed
        once per resourceVersion."""
        obj = self.gpunodes.get(name) or {}
        version = obj.get("metadata", {}).get("resourceVersion")
        cached = self._checks.get(name)
        if cached is None or cached[0] != version:
            cached = (version, published_checks(obj))
            self._checks[name] = cached
        return cached[1]

    def unreadable(self, name: str) -> str:
        """Why the status of GPUNode ``name`` cannot be parsed; empty when it can."""
        return self._summarized(name)[2]

    def summary(self, name: str) -> Summary:
        """What the fleet view and the accountant need of GPUNode ``name``, kept for
        every node (parsed once per resourceVersion)."""
        return self._summarized(name)[1]

    def policies_of(self, name: str) -> tuple[str, ...]:
        """Names of the policies whose selector matches Node ``name``."""
        node = self.nodes.get(name) or {}
        version = node.get("metadata", {}).get("resourceVersion")
        cached = self._matched.get(name)
        if cached is None or cached[0] != version or cached[1] != self._policy_epoch:
            labels = node.get("metadata", {}).get("labels") or {}
            found = tuple(
                sorted(
                    p["metadata"]["name"]
                    for p in self.policies.values()
                    if matches((p.get("spec") or {}).get("nodeSelector") or {}, labels)
                )
            )
            cached = (version, self._policy_epoch, found)
            self._matched[name] = cached
        return cached[2]

    def policy(self, name: str) -> PolicyView | None:
        """The parsed policy ``name``, parsed once per resourceVersion; None when it
        does not parse (see :meth:`policy_problem`)."""
        return self._parsed_policy(name)[1]

    def policy_problem(self, name: str) -> str:
        """Why policy ``name`` does not parse; empty when it does."""
        return self._parsed_policy(name)[2]

    def _parsed_policy(self, name: str) -> tuple[Any, PolicyView | None, str]:
        obj = self.policies[name]
        version = obj.get("metadata", {}).get("resourceVersion")
        cached = self._policies.get(name)
        if cached is None or cached[0] != version:
            try:
                cached = (version, policy_view(obj), "")
            except ValidationError as error:
                problems = "; ".join(
                    f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()[:5]
                )
                cached = (version, None, f"spec does not parse: {problems}")
            self._policies[name] = cached
        return cached

    @staticmethod
    def _newer(current: Object | None, incoming: Object) -> bool:
        if current is None:
            return True
        old, new = _version(current), _version(incoming)
        return old is None or new is None or new >= old

    def put(self, kind: str, obj: Object, *, deleted: bool = False) -> str | None:
        """Record an object (:func:`kept` of it); returns the node name it concerns, if
        any."""
        obj = kept(kind, obj)
        meta = obj.get("metadata", {})
        name = meta.get("name", "")
        if kind == "pdb":
            self._put_budget(object_key(obj), obj, deleted=deleted)
            return None
        if kind == "pod":
            return self._put_pod(obj, deleted=deleted)
        table = {
            "node": self.nodes,
            "gpunode": self.gpunodes,
            "policy": self.policies,
            "run": self.runs,
            "window": self.windows,
        }[kind]
        if kind == "policy" and (deleted or _spec_of(table.get(name)) != _spec_of(obj)):
            # Its selector may have moved: every node's match, and so every pool, with
            # it. Not on a status write (the operator's own, every few rounds).
            self._policy_epoch += 1
            self.fleet_changed.update(self.nodes)
        if deleted:
            table.pop(name, None)
            if kind == "node":
                self._matched.pop(name, None)
                self.reserved.pop(name, None)
                self.spares.discard(name)
                self.fleet_changed.add(name)
            elif kind == "gpunode":
                for cache in (self._packed, self._summaries, self._statuses, self._checks):
                    cache.pop(name, None)
                self.fleet_changed.add(name)
        elif self._newer(table.get(name), obj):
            before = table.get(name)
            full = obj
            if kind == "gpunode":
                obj = self._pack(name, obj)
            table[name] = obj
            self._count_fleet_change(kind, name, before, full)
            if kind == "node":
                self._index_reservation(name, obj)
            if kind == "node" and before is not None and decided_by(before) == decided_by(obj):
                return None  # a kubelet's status heartbeat: nothing a decision reads
        return name if kind in ("node", "gpunode") else None

    def _count_fleet_change(self, kind: str, name: str, before: Object | None, obj: Object) -> None:
        """Note in :attr:`fleet_changed` a node whose pool's fleet may have changed: it came
        or changed its labels (its pool), or a GPUNode's fleet counts changed (its
        summary is computed here, eagerly, from ``obj`` with its status: a heartbeat
        changes no count)."""
        if kind == "node":
            labels = (obj.get("metadata") or {}).get("labels")
            if before is None or (before.get("metadata") or {}).get("labels") != labels:
                self.fleet_changed.add(name)
        elif kind == "gpunode":
            previous = self._summaries.get(name)
            summary = self._summarized(name, obj)[1]
            if previous is None or counted_in_fleet(previous[1]) != counted_in_fleet(summary):
                self.fleet_changed.add(name)

    def _pack(self, name: str, obj: Object) -> Object:
        """``obj`` without its status, which is kept packed (see :meth:`gpunode`)."""
        status = obj.get("status")
        if status is None:
            self._packed.pop(name, None)
            return obj
        self._packed[name] = zlib.compress(json.dumps(status, separators=(",", ":")).encode(), 1)
        return {k: v for k, v in obj.items() if k != "status"}

    def _put_pod(self, obj: Object, *, deleted: bool) -> str | None:
        meta = obj.get("metadata", {})
        key = object_key(obj)
        node = (obj.get("spec") or {}).get("nodeName") or ""
        previous = self.pods.get(key)
        old_node = (previous.get("spec") or {}).get("nodeName") if previous else None
        if deleted:
            self.pods.pop(key, None)
            self.checkpoints_seen.pop(key, None)
            self.unscheduled.pop(key, None)
            self.capacity_waiting.pop(key, None)
            self.pods_by_node[old_node or node].pop(key, None)
            if training_job(obj) is not None and len(self.departed) < DEPARTED_MAX:
                self.departed[meta.get("uid") or key] = obj
            return old_node or node or None
        if not self._newer(previous, obj):
            return None
        self._checkpoint_seen(key, previous, obj)
        self.pods[key] = obj
        phase = (obj.get("status") or {}).get("phase", "Pending")
        if not node and phase == "Pending" and meta.get("deletionTimestamp") is None:
            self.unscheduled[key] = obj
        else:
            self.unscheduled.pop(key, None)
        if waits_for_capacity(obj):
            self.capacity_waiting[key] = obj
        else:
            self.capacity_waiting.pop(key, None)
        if old_node and old_node != node:
            self.pods_by_node[old_node].pop(key, None)
        if node:
            self.pods_by_node[node][key] = obj
        return node or None

    def _checkpoint_seen(self, key: str, previous: Object | None, obj: Object) -> None:
        """Date a pod's checkpoint by when this operator saw it change. A node's clock
        ahead of the operator's made a checkpoint from before the node was taken out
        look newer, so its drain began before the next one (the work since lost); one
        behind held the drain to ``checkpointMaxDelay``. A value the pod already had when
        first seen (after a restart) is dated EPOCH: a Suspect node waits for the next."""

        def said(pod: Object | None) -> Any:
            return ((pod or {}).get("metadata", {}).get("annotations") or {}).get(
                CHECKPOINT_ANNOTATION
            )

        now = said(obj)
        if not now:
            self.checkpoints_seen.pop(key, None)
        elif previous is None:
            self.checkpoints_seen[key] = EPOCH
        elif now != said(previous):
            self.checkpoints_seen[key] = self.clock()

    def disruption_budgets(self) -> list[Budget]:
        """Every PodDisruptionBudget, parsed once per version."""
        found = []
        for key, obj in self.budgets.items():
            version = obj.get("metadata", {}).get("resourceVersion")
            cached = self._budgets.get(key)
            if cached is None or cached[0] != version:
                cached = self._budgets[key] = (version, budget(obj))
            if cached[1] is not None:
                found.append(cached[1])
        return found

    def maintenance_windows(self) -> list[Window]:
        """Every maintenance request as a :class:`Window`, parsed once per version; one
        that does not parse covers nothing and is logged once."""
        kept: dict[tuple[str, str, Any], Window | None] = {}
        for kind, table, read in (
            ("window", self.windows, window),
            ("nodemaintenance", self.node_maintenances, node_maintenance),
        ):
            for name, obj in table.items():
                key = (kind, name, obj.get("metadata", {}).get("resourceVersion"))
                if key in self._windows:
                    kept[key] = self._windows[key]
                    continue
                try:
                    kept[key] = read(obj)
                except ValueError as error:
                    logger.warning("%s: it covers no node", error)
                    kept[key] = None
        self._windows = kept
        return [w for w in kept.values() if w is not None]

    def _put_budget(self, key: str, obj: Object, *, deleted: bool) -> None:
        if deleted:
            self.budgets.pop(key, None)
            self._budgets.pop(key, None)
            self._disrupted.pop(key, None)
        elif self._newer(self.budgets.get(key), obj):
            self.budgets[key] = obj
            version = _version(obj)
            shown = self._disrupted.setdefault(key, OrderedDict())
            for pod in (obj.get("status") or {}).get("disruptedPods") or {}:
                shown[pod] = -1 if version is None else version
                shown.move_to_end(pod)
            while len(shown) > DISRUPTED_KEPT:
                shown.popitem(last=False)

    def disrupted(self, key: str) -> dict[str, int]:
        """Pod name -> the latest resourceVersion of budget ``key`` whose
        ``status.disruptedPods`` listed it. The apiserver lists a pod there in the same
        write that counts its eviction, so that version, and every later one, counts
        it. Kept across versions because the budget's controller drops the pod once it
        sees it terminating, which may be before the drain looks again; the version
        tells a new eviction from an old one of a pod by the same name (a
        StatefulSet's)."""
        return dict(self._disrupted.get(key) or {})

    def take_fleet_changes(self) -> set[str]:
        """The nodes of :attr:`fleet_changed` (each is handed out once)."""
        taken, self.fleet_changed = self.fleet_changed, set()
        return taken

    def take_departed(self) -> list[Object]:
        """The training pods deleted since the last call (each is handed out once)."""
        taken, self.departed = list(self.departed.values()), {}
        return taken

    def pods_on(self, node: str) -> list[Object]:
        return list(self.pods_by_node.get(node, {}).values())

    def _index_reservation(self, name: str, node: Object) -> None:
        taints = (node.get("spec") or {}).get("taints") or []
        job = next(
            (str(t.get("value") or "") for t in taints if t.get("key") == RESERVED_TAINT), ""
        )
        if job:
            self.reserved[name] = job
        else:
            self.reserved.pop(name, None)
        if any(t.get("key") == SPARE_TAINT for t in taints):
            self.spares.add(name)
        else:
            self.spares.discard(name)

    def reserved_for(self, pod: Object) -> list[str]:
        """The nodes reserved for ``pod``'s training job: a pod of it waiting for a node,
        or no longer, is news to them."""
        if not self.reserved:
            return []
        job = reservation_job(pod)
        return sorted(n for n, reserved in self.reserved.items() if job and reserved == job)

    def lendable_to(self, pod: Object) -> list[str]:
        """The spares a training pod waiting for capacity is news to (one may be lent to
        its job); none for any other pod."""
        return sorted(self.spares) if object_key(pod) in self.capacity_waiting else []

    def waiting(self, job: str) -> list[Object]:
        """The pods of training job ``job`` (as a reservation names it) on no node yet."""
        return [p for p in self.unscheduled.values() if reservation_job(p) == job]

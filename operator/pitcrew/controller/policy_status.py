"""Write each GPUHealthPolicy's status: its fleet, its breaker, its goodput.

What the breaker *is* comes from the pure :func:`pitcrew.core.breaker.next_breaker`;
this writer turns it into the status a person reads (``kubectl get ghp``),
the gauge the alert fires on and the two Events a breaker trip is worth
(opened, closed). Writes go through a single thread of their own, in order,
so a policy status is never queued behind node plans; a status that did not
change is not written at all, and one that did is written at most every
:data:`WRITE_EVERY` unless its breaker may turn.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import Executor as Pool
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pitcrew.api.meta import API_VERSION, Duration
from pitcrew.api.policy import GPUHealthPolicy
from pitcrew.controller import metrics
from pitcrew.controller.ports import Cluster, EventSink
from pitcrew.controller.store import Store
from pitcrew.core.breaker import Breaker, Transition, next_breaker
from pitcrew.core.convert import policy_view
from pitcrew.core.port_types import Ref
from pitcrew.core.views import FleetView

logger = logging.getLogger(__name__)


WRITE_EVERY = 2.0
"""Seconds between two writes of one policy's status, at least, but for a breaker
that may turn: a drain of fifty nodes changes the fleet's counts many times a
second, and a person reads them no faster."""


def _timer(seconds: float, fn: Callable[[], None]) -> None:
    timer = threading.Timer(seconds, fn)
    timer.daemon = True
    timer.start()


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


Goodput = Callable[[str, Sequence[Duration], datetime.datetime], list[dict[str, Any]]]
"""A pool's fleet goodput over each window (the accountant's ledger)."""


def breaker_fields(breaker: Breaker) -> dict[str, Any]:
    """The breaker as the status shows it: ``since`` and ``message`` only while open."""
    fields: dict[str, Any] = {"open": breaker.open}
    if breaker.open:
        fields["since"] = breaker.since.isoformat() if breaker.since else None
        fields["message"] = breaker.message
    return fields


def _valid(previous: dict[str, Any], policy: dict[str, Any], now: datetime.datetime) -> Any:
    """``Valid=True``, keeping its transition time while it stays true."""
    old = next((c for c in previous.get("conditions") or [] if c.get("type") == "Valid"), None)
    since = old["lastTransitionTime"] if old and old.get("status") == "True" else now.isoformat()
    return {
        "type": "Valid",
        "status": "True",
        "reason": "SpecApplied",
        "message": "",
        "lastTransitionTime": since,
        "observedGeneration": policy["metadata"].get("generation", 1),
    }


def _readable(
    previous: dict[str, Any],
    policy: dict[str, Any],
    now: datetime.datetime,
    problem: str,
    *,
    kind: str,
    reasons: tuple[str, str],
) -> dict[str, Any] | None:
    """A condition of an optional API the operator reads: False while it cannot be read
    as it should (a version no longer served, no permission: what was last read is
    kept), True again once it can; absent while nothing was ever wrong. ``reasons``:
    (unreadable, read). ``MaintenanceRequests``: medik8s NodeMaintenances;
    ``JobSizes``: the launchers' objects that declare training jobs' sizes."""
    old = next((c for c in previous.get("conditions") or [] if c.get("type") == kind), None)
    if not problem and old is None:
        return None
    status = "False" if problem else "True"
    since = old["lastTransitionTime"] if old and old.get("status") == status else now.isoformat()
    return {
        "type": kind,
        "status": status,
        "reason": reasons[0] if problem else reasons[1],
        "message": problem[:32768],
        "lastTransitionTime": since,
        "observedGeneration": policy["metadata"].get("generation", 1),
    }


class PolicyStatusWriter:
    def __init__(
        self,
        *,
        cluster: Cluster,
        store: Store,
        events: EventSink,
        goodput: Goodput,
        pool: Pool | None = None,
        every: float = WRITE_EVERY,
        later: Callable[[float, Callable[[], None]], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.store = store
        self.events = events
        self.goodput = goodput
        self._pool = pool or ThreadPoolExecutor(max_workers=1, thread_name_prefix="pitcrew-policy")
        """One worker: a policy's writes land in the order they were submitted."""
        self._said: set[tuple[str, Any]] = set()
        self._lock = threading.Lock()
        self._queued: dict[str, list[tuple[FleetView, datetime.datetime]]] = defaultdict(list)
        self.every = every
        self._later = later or _timer
        self._monotonic = monotonic
        self._last: dict[str, tuple[float, bool]] = {}
        """Per policy, when its status was last written and whether nodes were refused."""

    def submit(self, name: str, fleet: FleetView, now: datetime.datetime) -> None:
        """Write policy ``name``'s status in the background, after earlier writes.

        A fleet submitted while an earlier one still waits takes its place, unless
        one has failing nodes kept in service and the other has none: the breaker
        sees every opening and every closing, and a drain of fifty nodes, whose
        every phase change is a round, writes the policy once per write it waits
        for instead of once per round."""
        with self._lock:
            queue = self._queued[name]
            if queue and (queue[-1][0].refused > 0) == (fleet.refused > 0):
                queue[-1] = (fleet, now)
                return
            queue.append((fleet, now))
        self._pool.submit(self._write_next, name)

    def _write_next(self, name: str) -> None:
        """Write the oldest queued fleet of ``name``, no sooner than :attr:`every` after
        its last write unless the breaker may turn. One that must wait goes back to
        the writer's queue when its time comes (other policies' writes go on
        meanwhile), and a fleet submitted meanwhile takes its place (:meth:`submit`)."""
        with self._lock:
            refusing = self._queued[name][0][0].refused > 0
            last = self._last.get(name)
            wait = last[0] + self.every - self._monotonic() if last else 0.0
            if last is not None and last[1] == refusing and wait > 0:
                self._later(wait, lambda: self._resubmit(name))
                return
            fleet, now = self._queued[name].pop(0)
        try:
            written = self.write(name, fleet, now)
        except Exception:
            logger.exception("writing the status of policy %s failed", name)
            return
        if written:
            with self._lock:
                self._last[name] = (self._monotonic(), fleet.refused > 0)

    def _resubmit(self, name: str) -> None:
        self._pool.submit(self._write_next, name)

    def unreadable(self, name: str, problem: str) -> None:
        """Say once (an Event and a ``Valid=False`` condition) that policy ``name``
        cannot be read; its nodes are left as they are. The rest of its status
        (breaker, cooldown) is written back as it was, so nothing is forgotten."""
        policy = self.store.policies.get(name)
        if policy is None:
            return
        key = (name, policy["metadata"].get("generation"))  # status writes keep it
        if key in self._said:
            return
        self._said.add(key)
        ref = Ref(GPUHealthPolicy.KIND, name, API_VERSION, policy["metadata"].get("uid", ""))
        message = f"policy {name} is not applied: {problem}"
        self.events.emit(ref, reason="PolicyUnreadable", message=message, warning=True)
        status = dict(policy.get("status") or {})
        status["conditions"] = [
            *(c for c in status.get("conditions") or [] if c.get("type") != "Valid"),
            {
                "type": "Valid",
                "status": "False",
                "reason": "SpecUnreadable",
                "message": message[:32768],
                "lastTransitionTime": utc_now().isoformat(),
                "observedGeneration": policy["metadata"].get("generation", 1),
            },
        ]
        self._pool.submit(self._apply_logged, name, status)

    def _apply_logged(self, name: str, status: dict[str, Any]) -> None:
        try:
            self.store.put("policy", self.cluster.apply_policy_status(name=name, status=status))
        except Exception:
            logger.exception("writing the status of policy %s failed", name)

    def write(self, name: str, fleet: FleetView, now: datetime.datetime) -> bool:
        """Write policy ``name``'s status for ``fleet``; whether it changed."""
        policy = self.store.policies.get(name)
        if policy is None:
            return False  # deleted since the round
        view = policy_view(policy)
        current = Breaker(view.breaker_open, view.breaker_since, "", view.cooldown_until)
        breaker, transition = next_breaker(current, fleet=fleet, safety=view.spec.safety, now=now)
        metrics.BREAKER_OPEN.labels(name).set(1 if breaker.open else 0)
        metrics.GOODPUT_TARGET.labels(name).set(view.spec.goodput.target)
        status: dict[str, Any] = {
            "observedGeneration": policy["metadata"].get("generation", 1),
            "nodes": fleet.total,
            "unhealthy": fleet.unhealthy,
            "phases": {str(k): v for k, v in sorted(fleet.phases.items()) if v},
            "breaker": breaker_fields(breaker),
            "goodput": {
                "target": view.spec.goodput.target,
                "windows": self.goodput(name, view.spec.goodput.windows, now),
            },
        }
        if breaker.cooldown_until:
            status["cooldownUntil"] = breaker.cooldown_until.isoformat()
        previous = policy.get("status") or {}
        status["conditions"] = [_valid(previous, policy, now)]
        for problem, kind, reasons in (
            (
                self.store.maintenance_problem,
                "MaintenanceRequests",
                ("NodeMaintenanceUnreadable", "NodeMaintenanceRead"),
            ),
            (self.store.job_size_problem, "JobSizes", ("JobSizeUnreadable", "JobSizeRead")),
        ):
            condition = _readable(previous, policy, now, problem, kind=kind, reasons=reasons)
            if condition is not None:
                status["conditions"].append(condition)
        if {k: v for k, v in previous.items() if k in status} == status:
            return False
        ref = Ref(GPUHealthPolicy.KIND, name, API_VERSION, policy["metadata"].get("uid", ""))
        if transition is Transition.OPENED:
            self.events.emit(ref, reason=transition, message=breaker.message, warning=True)
        elif transition is Transition.CLOSED:
            self.events.emit(
                ref,
                reason=transition,
                message=f"quarantines resume after {status['cooldownUntil']}",
            )
        written = self.cluster.apply_policy_status(name=name, status=status)
        self.store.put("policy", written)
        return True

"""The values that cross the shell's ports (:mod:`pitcrew.controller.ports`).

:class:`~pitcrew.controller.ports.Cluster` and
:class:`~pitcrew.controller.ports.EventSink` are what the round loop, the executor and
the policy-status writer ask of the world; their Kubernetes adapters
(:class:`pitcrew.kube.cluster.KubeCluster`, :class:`pitcrew.kube.events.Recorder`) and
the unit tests' fakes answer them. The types those calls take and return belong to the
ports, not to one adapter: were they defined in :mod:`pitcrew.kube`, the protocols (and
every fake) would depend on the Kubernetes client's package to say what they mean.

They live here rather than beside the protocols because the adapters import them too,
and :mod:`pitcrew.kube` sits below :mod:`pitcrew.controller` in the layers: this module
is the one place both may import. It is plain data and pure bookkeeping, no I/O.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Final

CLUSTER_EVENTS_NAMESPACE: Final = "default"
"""Where the Events of a cluster-scoped object go (where ``kubectl describe node``
looks for them)."""
BACKOFF_START: Final = datetime.timedelta(seconds=1)
BACKOFF_MAX: Final = datetime.timedelta(seconds=8)


@dataclass(frozen=True)
class Ref:
    """The object an Event is about."""

    kind: str
    name: str
    api_version: str = "v1"
    uid: str = ""
    namespace: str | None = None
    """The object's namespace; None for a cluster-scoped one, whose Events go to
    :data:`CLUSTER_EVENTS_NAMESPACE`."""

    @property
    def event_namespace(self) -> str:
        return self.namespace or CLUSTER_EVENTS_NAMESPACE


@dataclass
class EvictionResult:
    """What became of each pod of one round of evictions, by pod key
    (``namespace/name``)."""

    evicted: list[str] = field(default_factory=list)
    blocked: dict[str, str] = field(default_factory=dict)
    """pod key -> why the apiserver refused (PDB message)."""
    gone: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    """pod key -> the error: any other answer, or none (the eviction may have been made)."""
    skipped: list[str] = field(default_factory=list)
    """In backoff after an earlier refusal."""
    budgets: dict[str, str] = field(default_factory=dict)
    """pod key -> ``namespace/name`` of the PodDisruptionBudget that refused it."""


@dataclass
class Backoff:
    """Per-pod backoff after a PDB refusal: doubling from :data:`BACKOFF_START` up to
    :data:`BACKOFF_MAX`, in memory (after a restart the first retry is immediate, which
    is harmless since a refused eviction did nothing)."""

    next_try: dict[str, datetime.datetime] = field(default_factory=dict)
    delay: dict[str, datetime.timedelta] = field(default_factory=dict)

    def ready(self, key: str, now: datetime.datetime) -> bool:
        return now >= self.next_try.get(key, now)

    def refused(self, key: str, now: datetime.datetime) -> None:
        delay = min(self.delay.get(key, BACKOFF_START / 2) * 2, BACKOFF_MAX)
        self.delay[key] = delay
        self.next_try[key] = now + delay

    def earliest(self, now: datetime.datetime) -> float:
        """Seconds until the first pod in backoff may be retried."""
        waits = [(t - now).total_seconds() for t in self.next_try.values()]
        return max(0.1, min((w for w in waits if w > 0), default=BACKOFF_START.total_seconds()))

    def forget(self, key: str) -> None:
        self.next_try.pop(key, None)
        self.delay.pop(key, None)

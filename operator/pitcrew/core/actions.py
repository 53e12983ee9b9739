"""What the decision logic asks the shell to do.

Each action is a small frozen record. The shell (:mod:`pitcrew.controller.executor`)
executes them idempotently: cordoning a cordoned node, creating a Job that
exists or evicting a pod that is already gone are no-ops, so a decision that
is executed twice (a retry, a new leader) does no harm. Every action also
becomes an Event on the Node, with ``reason`` and ``message``.

A plan's cordon goes first, ahead of every other write of any plan
(:func:`cordon_first`): it is what keeps new work off a failing node, and the
status, Events, spare and remediation that follow are worth less each second
than the next node's cordon.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from pitcrew.api.gpunode import AgentChecks
from pitcrew.api.policy import RemediationAction
from pitcrew.core.views import PodView


@dataclass(frozen=True, kw_only=True)
class Cordon:
    taint: str
    value: str
    reason: str
    message: str


@dataclass(frozen=True, kw_only=True)
class Uncordon:
    """Remove Pitcrew's taints and, if Pitcrew made the cordon, the cordon."""

    reason: str
    message: str


@dataclass(frozen=True, kw_only=True)
class SetTaint:
    taint: str
    value: str
    reason: str
    message: str
    replaces: str = ""
    """A taint that goes in the same edit (a spare's taint swapped for a reservation, and
    back), so the node is never bare between the two; only from a node that still
    carries it: if it is gone, someone else moved the node on, and nothing is done."""


@dataclass(frozen=True, kw_only=True)
class RemoveTaint:
    taint: str
    reason: str
    message: str


@dataclass(frozen=True, kw_only=True)
class Evict:
    pods: tuple[PodView, ...]
    reason: str = "Draining"
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class ForceDelete:
    pods: tuple[PodView, ...]
    reason: str = "DrainTimeoutForce"
    message: str = ""
    grace_seconds: int | None = None
    """At most this grace period (None: each pod's own; 0 to one already terminating)."""


@dataclass(frozen=True, kw_only=True)
class RestartInPlace:
    """Ask the pods of training job ``namespace/job`` that run elsewhere to restart in
    place (:mod:`pitcrew.core.in_place`): this node's pods of it are being taken away."""

    namespace: str
    job: str
    since: datetime.datetime
    """The drain's start: the request's value, the same each time it is decided."""
    reason: str = "RestartInPlace"
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class StartProbe:
    suite: str
    name: str
    """Deterministic Job name: creating it twice is a no-op."""
    reason: str = "ValidationStarted"
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class CancelProbe:
    """Delete a probe Job (and its pod) that must not run on: a verification that gave
    way to a workload, timed out, or whose node left service."""

    name: str
    reason: str = "ProbeCancelled"
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class Remediate:
    action: RemediationAction
    step: int
    attempt: int
    key: str
    """Idempotency key: Job name, webhook Idempotency-Key, annotation value."""
    gpus: tuple[int, ...] = ()
    reason: str = "RemediationStarted"
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class ConfirmRepair:
    """Tell the node agent the repair ``key`` happened (``pitcrew.dev/last-remediation``):
    it forgets the findings it latched before it, and its next report carries the key."""

    action: RemediationAction
    key: str
    reason: str = "RepairConfirmed"
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class ReleaseSpare:
    node: str
    reason: str = "SpareReleased"
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class ReserveSpare:
    """Reserve spare ``node`` for training job ``job`` (its taint value): its spare taint
    becomes ``pitcrew.dev/reserved=<job>``, in one edit, if it still carries it."""

    node: str
    job: str
    reason: str = "SpareReserved"
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class Tolerate:
    """Add the toleration of taint ``taint=value`` to pending ``pods`` (a job's pods
    waiting for the spare reserved for it): appending to a pending pod's tolerations is
    the one change to its spec Kubernetes allows, and the only one made."""

    pods: tuple[PodView, ...]
    taint: str
    value: str
    reason: str = "ReservationTolerated"
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class PublishChecks:
    """Write the check configuration the node's agent must run (``GPUNode.spec.checks``)."""

    checks: AgentChecks
    reason: str = "ChecksConfigured"
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class SetSlurmState:
    """``scontrol update NodeName=<node> State=<state> [Reason=<slurm_reason>]``: drain
    (Slurm starts no job, running ones finish), down (Slurm kills them: a drain's
    forced end) or resume (only a drain Pitcrew made)."""

    node: str
    state: str
    slurm_reason: str = ""
    reason: str = "SlurmDrained"
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class Record:
    """Only an Event: a decision taken or refused, with nothing to execute."""

    reason: str
    message: str
    warning: bool = False


Action = (
    Cordon
    | Uncordon
    | SetTaint
    | RemoveTaint
    | Evict
    | ForceDelete
    | RestartInPlace
    | StartProbe
    | CancelProbe
    | Remediate
    | ConfirmRepair
    | ReleaseSpare
    | ReserveSpare
    | Tolerate
    | PublishChecks
    | SetSlurmState
    | Record
)


def cordon_first(actions: tuple[Action, ...]) -> tuple[tuple[Cordon, ...], tuple[Action, ...]]:
    """The cordons of a plan, to carry out first, and everything else in its order.

    A cordon carries its taint in the same patch (:mod:`pitcrew.core.node_edits`), so
    one write takes the node out. An intent written before a remediation and the
    other actions keep their order among themselves; nothing of theirs reads the
    node's schedulability, which the cordon alone changes."""
    first = tuple(x for x in actions if isinstance(x, Cordon))
    return first, tuple(x for x in actions if not isinstance(x, Cordon))

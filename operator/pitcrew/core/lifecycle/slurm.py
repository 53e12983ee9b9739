"""Slurm kept in step with Pitcrew, for nodes of a policy that drains through Slurm.

A node out of service is drained in Slurm by Pitcrew's hand (reason ``pitcrew:
<reason>``) and resumed when it is back, only if Pitcrew drained it; a drain or
DOWN made by a person or by Slurm is shown and never undone. A drain waits for
Slurm's jobs as it waits for pods, and its timeout downs the Slurm node (Force)
or remediates anyway (Escalate).

A Slurm node whose state cannot be read now (:class:`~pitcrew.core.views.SlurmUnreadable`)
is not "no Slurm": its drain waits for it (``slurm/<name> (not readable)``) until the
drain's timeout, nothing is drained or resumed in Slurm on a guess, and the
``SlurmReadable`` condition and an Event say why. Every way out of Slurm's part undoes
Pitcrew's drain: back in service, opted out, or a policy that stops draining through
Slurm (the node's ``status.slurm`` keeps the Slurm name until that drain is gone).
"""

from __future__ import annotations

from pitcrew.api.gpunode import DrainStatus, Phase, SlurmNodeStatus
from pitcrew.api.meta import ConditionStatus
from pitcrew.api.policy import DrainTimeoutAction
from pitcrew.api.vocabulary import SLURM_REASON_PREFIX
from pitcrew.core import actions as a
from pitcrew.core.lifecycle.builder import Builder
from pitcrew.core.lifecycle.facts import elapsed
from pitcrew.core.views import SlurmNodeView, SlurmUnreadable

SLURM_IN = frozenset({Phase.HEALTHY, Phase.PENDING, Phase.EXCLUDED})
"""Phases in which Pitcrew keeps no Slurm drain: in service, not judged yet, opted out."""
SLURM_RESUMED_IN = frozenset({Phase.HEALTHY, Phase.EXCLUDED})
"""Phases in which Pitcrew's own Slurm drain is undone: back in service, or handed back
(opted out). A Pending node is judged first (its drain may be for a fault not yet seen
again)."""
READABLE = "SlurmReadable"
"""The condition that says whether the node's Slurm state could be read."""


def slurm_pending(b: Builder) -> list[str]:
    """What a drain still waits for in Slurm: its state to be readable, its drain to be
    seen, then its jobs."""
    slurm = b.node.slurm
    if slurm is None:
        return []
    if isinstance(slurm, SlurmUnreadable):
        return [f"slurm/{slurm.name or b.node.name} (not readable)"]
    if not slurm.out:
        return [f"slurm/{slurm.name} (drain not seen yet)"]
    if not slurm.busy:
        return []
    if not slurm.jobs:
        return [f"slurm/{slurm.name} (jobs running)"]
    return [f"slurm/job/{j.id}" for j in slurm.jobs]


def slurm_timed_out(b: Builder, drain: DrainStatus) -> str:
    """The drain is past its timeout and only Slurm holds it: what is left, when the
    rung must start anyway now; empty while it waits on.

    Escalate: at once. Force: the Slurm node goes DOWN (Slurm kills or requeues its jobs,
    as for a failed node), and the rung starts anyway once ``slurm.downGrace`` more has
    passed with the node still held: a job stuck COMPLETING (its processes unkillable, an
    epilog that hangs) or a Slurm that cannot be read would otherwise hold the drain, and
    its slot, for ever."""
    spec = b.policy.spec
    slurm = b.node.slurm
    assert slurm is not None  # only Slurm can be pending once pods are gone
    if isinstance(slurm, SlurmUnreadable):
        left = f"Slurm node {slurm.name or b.node.name} not readable ({slurm.why})"
    else:
        left = f"Slurm jobs running on {slurm.name}"
    if spec.safety.drain.on_timeout is not DrainTimeoutAction.FORCE:
        return left
    if isinstance(slurm, SlurmNodeView) and "DOWN" not in slurm.states:
        b.actions.append(
            a.SetSlurmState(
                node=slurm.name,
                state="DOWN",
                slurm_reason=slurm_reason(b),
                reason="DrainTimeoutForce",
                message=f"drain timed out after {spec.safety.drain.timeout}: Slurm node "
                f"{slurm.name} set DOWN, its jobs ended by Slurm",
            )
        )
    grace = spec.safety.drain.timeout + spec.slurm.down_grace
    if not elapsed(b, drain.started_at, grace):
        return ""
    return f"{left}, {spec.slurm.down_grace} after it was to be set DOWN"


def slurm_reason(b: Builder) -> str:
    return f"{SLURM_REASON_PREFIX}{b.status.reason or b.status.phase}"[:256]


def sync(b: Builder) -> None:
    """Slurm's view of the node in its status, and Slurm's state following the phase."""
    slurm = b.node.slurm
    if not b.policy.spec.slurm.enabled:
        _handed_back(b)
        return
    if slurm is None:
        _readable(b, "NotInSlurm", "Slurm lists no node of this name: drained in Kubernetes only")
        b.set(slurm=None)
        return
    if isinstance(slurm, SlurmUnreadable):
        _unreadable(b, slurm)
        return
    _readable(b, "Read", f"Slurm node {slurm.name}: {'+'.join(slurm.states)}")
    _show(b, slurm)
    phase = b.status.phase
    if phase in SLURM_RESUMED_IN and slurm.pitcrews:
        _resume(b, slurm, b.status.reason if phase is Phase.HEALTHY else "opted out")
    elif phase not in SLURM_IN and (not slurm.out or (slurm.pitcrews and not slurm.drained)):
        # Pitcrew's own DOWN gets a drain on top: with ReturnToService, a DOWN node
        # takes jobs again as soon as its slurmd registers, before any validation.
        b.actions.append(
            a.SetSlurmState(
                node=slurm.name,
                state="DRAIN",
                slurm_reason=slurm_reason(b),
                reason="SlurmDrained",
                message=f"Slurm node {slurm.name} drained: no new jobs start there",
            )
        )


def _show(b: Builder, slurm: SlurmNodeView) -> None:
    owner = "pitcrew" if slurm.pitcrews else "other" if slurm.out else ""
    b.set(
        slurm=SlurmNodeStatus(
            node=slurm.name, state="+".join(slurm.states), reason=slurm.reason, drained_by=owner
        )
    )


def _resume(b: Builder, slurm: SlurmNodeView, why: str) -> None:
    b.actions.append(
        a.SetSlurmState(
            node=slurm.name,
            state="RESUME",
            reason="SlurmResumed",
            message=f"Slurm node {slurm.name} resumed: {why}",
        )
    )


def _handed_back(b: Builder) -> None:
    """The policy no longer drains through Slurm: Pitcrew's own drain, which the status
    remembers, is resumed; the status forgets the Slurm node once that drain is gone."""
    slurm = b.node.slurm
    remembered = b.status.slurm
    b.set(conditions=[c for c in b.status.conditions if c.type != READABLE])
    if remembered is None:
        return
    if isinstance(slurm, SlurmUnreadable):
        return  # tried again once Slurm can be read
    if isinstance(slurm, SlurmNodeView) and slurm.pitcrews:
        _resume(b, slurm, f"policy {b.policy.name} no longer drains through Slurm")
        return
    b.set(slurm=None)


def _readable(b: Builder, reason: str, message: str) -> None:
    b.condition(READABLE, ConditionStatus.TRUE, reason, message)


def _unreadable(b: Builder, slurm: SlurmUnreadable) -> None:
    """Said in the condition and, when it starts or its cause changes, in an Event. The
    status keeps the last Slurm state it saw (who drained it is Pitcrew's memory)."""
    name = slurm.name or b.node.name
    message = f"Slurm state of {name} not readable: {slurm.why}"
    said = any(
        c.type == READABLE and c.status is ConditionStatus.FALSE and c.message == message
        for c in b.status.conditions
    )
    b.condition(READABLE, ConditionStatus.FALSE, "SlurmUnreadable", message)
    if not said:
        b.actions.append(a.Record(reason="SlurmUnreadable", message=message, warning=True))

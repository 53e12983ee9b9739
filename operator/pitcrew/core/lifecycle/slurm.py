"""Slurm kept in step with Pitcrew, for nodes of a policy that drains through Slurm.

A node out of service is drained in Slurm by Pitcrew's hand (reason ``pitcrew:
<reason>``) and resumed when it is back, only if Pitcrew drained it; a drain or
DOWN made by a person or by Slurm is shown and never undone. A drain waits for
Slurm's jobs as it waits for pods, and its timeout downs the Slurm node (Force)
or remediates anyway (Escalate).
"""

from __future__ import annotations

from pitcrew.api.gpunode import Phase, SlurmNodeStatus
from pitcrew.api.policy import DrainTimeoutAction
from pitcrew.api.vocabulary import SLURM_REASON_PREFIX
from pitcrew.core import actions as a
from pitcrew.core.lifecycle.builder import Builder

SLURM_IN = frozenset({Phase.HEALTHY, Phase.PENDING, Phase.EXCLUDED})
"""Phases in which Pitcrew keeps no Slurm drain: in service, not judged yet, opted out."""


def slurm_pending(b: Builder) -> list[str]:
    """What a drain still waits for in Slurm: its drain to be seen, then its jobs."""
    slurm = b.node.slurm
    if slurm is None:
        return []
    if not slurm.out:
        return [f"slurm/{slurm.name} (drain not seen yet)"]
    if not slurm.busy:
        return []
    if not slurm.jobs:
        return [f"slurm/{slurm.name} (jobs running)"]
    return [f"slurm/job/{j.id}" for j in slurm.jobs]


def slurm_down(b: Builder) -> bool:
    """A drain past its timeout with Slurm's jobs still running, under Force: the
    Slurm node goes DOWN (Slurm kills or requeues them, as it would for a failed
    node). False under Escalate, which the drain carries out itself."""
    spec = b.policy.spec.safety.drain
    slurm = b.node.slurm
    assert slurm is not None  # only Slurm can be pending once pods are gone
    if spec.on_timeout is not DrainTimeoutAction.FORCE:
        return False
    if "DOWN" not in slurm.states:
        b.actions.append(
            a.SetSlurmState(
                node=slurm.name,
                state="DOWN",
                slurm_reason=slurm_reason(b),
                reason="DrainTimeoutForce",
                message=f"drain timed out after {spec.timeout}: Slurm node "
                f"{slurm.name} set DOWN, its jobs ended by Slurm",
            )
        )
    return True


def slurm_reason(b: Builder) -> str:
    return f"{SLURM_REASON_PREFIX}{b.status.reason or b.status.phase}"[:256]


def sync(b: Builder) -> None:
    """Slurm's view of the node in its status, and Slurm's state following the phase."""
    slurm = b.node.slurm
    if slurm is None:
        b.set(slurm=None)
        return
    owner = "pitcrew" if slurm.pitcrews else "other" if slurm.out else ""
    b.set(
        slurm=SlurmNodeStatus(
            node=slurm.name, state="+".join(slurm.states), reason=slurm.reason, drained_by=owner
        )
    )
    phase = b.status.phase
    if phase is Phase.HEALTHY and slurm.pitcrews:
        b.actions.append(
            a.SetSlurmState(
                node=slurm.name,
                state="RESUME",
                reason="SlurmResumed",
                message=f"Slurm node {slurm.name} resumed: {b.status.reason}",
            )
        )
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

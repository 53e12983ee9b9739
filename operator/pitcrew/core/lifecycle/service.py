"""Into service: lifting Pitcrew's cordon, or holding a validated node back as a spare.

Shared by every phase that ends in service (a passed validation, a repair without
burn-in, a cleared fault, a withdrawn request). Only Pitcrew's cordon and taints are
ever lifted: a cordon someone else made stays.
"""

from __future__ import annotations

from pitcrew.api.gpunode import Phase
from pitcrew.api.vocabulary import (
    MANAGED_LABEL,
    PITCREW_TAINTS,
    QUARANTINE_TAINT,
    RETIRED_TAINT,
    SPARE_TAINT,
    VALIDATING_TAINT,
)
from pitcrew.core import actions as a
from pitcrew.core.lifecycle.builder import Builder
from pitcrew.core.lifecycle.facts import spares_wanted


def lift_cordon(b: Builder, reason: str, message: str, *, spare_too: bool = False) -> None:
    """Undo Pitcrew's cordon and out-of-service taints (never someone else's cordon);
    the spare taint too when the node goes into service."""
    taints: tuple[str, ...] = (QUARANTINE_TAINT, VALIDATING_TAINT, RETIRED_TAINT)
    if spare_too:
        taints = (*taints, SPARE_TAINT)
    node = b.node
    if (
        node.cordoned_by_pitcrew
        or node.stale_cordon_claim
        or any(node.has_taint(t) for t in taints)
    ):
        b.actions.append(a.Uncordon(reason=reason, message=message))


def hand_back(b: Builder) -> None:
    """Opted out (``pitcrew.dev/managed=false``): the node is handed back whole, as when
    no policy manages it any more. Every mark of Pitcrew's goes: its cordon, every taint
    of its own (a spare's and a reservation's too) and what its status held of a drain,
    a rung or a reservation; Pitcrew's Slurm drain goes in ``slurm.sync``.
    A cordon someone else made stays: to keep the node out, cordon it by hand."""
    node = b.node
    if (
        node.cordoned_by_pitcrew
        or node.stale_cordon_claim
        or any(node.has_taint(t) for t in PITCREW_TAINTS)
    ):
        b.actions.append(
            a.Uncordon(
                reason="OptedOut",
                message=f"labelled {MANAGED_LABEL}=false: Pitcrew's cordon and taints lifted",
            )
        )
    b.set(drain=None, remediation=None, repair_under_test=None, reservation=None)


def hold_as_spare(
    b: Builder, reason: str, message: str, *, lift: bool = False, replaces: str = ""
) -> None:
    """Spare: validated, kept free of work by its taint for the job that loses a node.
    With ``lift``, Pitcrew's cordon goes first (Uncordon drops every Pitcrew taint, so
    the spare taint goes on after it); with ``replaces``, the spare taint takes that
    taint's place in one edit (a reservation nobody claimed)."""
    b.go(Phase.SPARE, reason, message)
    if lift:
        lift_cordon(b, reason, "validated: cordon lifted, spare taint kept")
    b.actions.append(
        a.SetTaint(
            taint=SPARE_TAINT,
            value="true",
            reason="HeldAsSpare",
            message="tainted as a hot spare",
            replaces=replaces,
        )
    )


def back_in_service(b: Builder, reason: str, message: str) -> None:
    """In service again: Healthy, or Spare while the pool holds fewer than it wants."""
    if len(b.fleet.spares) < spares_wanted(b):
        hold_as_spare(b, reason, f"{message}; held back as a hot spare", lift=True)
        return
    b.go(Phase.HEALTHY, reason, message)
    lift_cordon(b, reason, f"back in service: {message}", spare_too=True)

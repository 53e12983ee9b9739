"""A job that loses its progress on a fatal fault anyway has its pods deleted at once."""

from __future__ import annotations

import dataclasses
import datetime

from gpuhealth.report import FaultClass
from pitcrew.api.gpunode import Phase
from pitcrew.api.vocabulary import FAST_GRACE_SECONDS, QUARANTINE_TAINT
from pitcrew.core import actions as a
from pitcrew.core.lifecycle import Decision, decide
from pitcrew.core.views import PodView
from support.lifecycle_data import (
    T0,
    finding,
    fleet,
    node,
    pitcrew_cordoned,
    pod,
    policy,
    report,
    state,
    status,
)

LATER = T0 + datetime.timedelta(hours=1)


def lost(name: str) -> PodView:
    """A pod of a job that declares ``pitcrew.dev/progress-lost-on-fault: "true"``."""
    return dataclasses.replace(pod(name), progress_lost=True)


def drained(fault: FaultClass, *pods: PodView) -> Decision:
    view = pitcrew_cordoned(node(pods=pods), QUARANTINE_TAINT)
    phase = Phase.QUARANTINED if fault is FaultClass.FATAL else Phase.SUSPECT
    current = status(phase, checks=report(finding(fault)))
    return decide(state=state(view, current), policy=policy(), fleet=fleet(), now=LATER)


def test_on_a_fatal_fault_its_pods_are_deleted_at_once_and_the_others_evicted() -> None:
    decision = drained(FaultClass.FATAL, lost("trainer-0"), pod("web-0", job=""))
    assert decision.phase is Phase.DRAINING
    deleted = [x for x in decision.actions if isinstance(x, a.ForceDelete)]
    assert [[p.name for p in d.pods] for d in deleted] == [["trainer-0"]]
    assert deleted[0].grace_seconds == FAST_GRACE_SECONDS
    assert deleted[0].reason == "ProgressLostOnFault"
    evicted = [x for x in decision.actions if isinstance(x, a.Evict)]
    assert [[p.name for p in e.pods] for e in evicted] == [["web-0"]]


def test_only_those_pods_no_eviction_is_asked() -> None:
    decision = drained(FaultClass.FATAL, lost("trainer-0"), lost("trainer-1"))
    assert [type(x) for x in decision.actions if isinstance(x, a.Evict | a.ForceDelete)] == [
        a.ForceDelete
    ]


def test_a_job_that_declares_nothing_is_evicted_as_ever() -> None:
    decision = drained(FaultClass.FATAL, pod("trainer-0"))
    assert not [x for x in decision.actions if isinstance(x, a.ForceDelete)]
    assert [x for x in decision.actions if isinstance(x, a.Evict)]


def test_a_degraded_fault_keeps_the_checkpoint_aware_drain() -> None:
    decision = drained(FaultClass.DEGRADED, lost("trainer-0"))
    assert decision.phase is Phase.SUSPECT  # waits for the job's next checkpoint
    assert not [x for x in decision.actions if isinstance(x, a.ForceDelete | a.Evict)]

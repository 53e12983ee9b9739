"""A straggler: its job's reports, not its own checks, take a Healthy node out."""

from __future__ import annotations

import dataclasses
import datetime
from typing import TypeVar

import pytest

from gpuhealth.report import FaultClass
from pitcrew.api.gpunode import GPUNodeStatus, Phase
from pitcrew.api.vocabulary import QUARANTINE_TAINT, STRAGGLER_REASON
from pitcrew.core import actions as a
from pitcrew.core.lifecycle import decide
from pitcrew.core.views import NodeState, NodeView
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

K = TypeVar("K")

LATER = T0 + datetime.timedelta(minutes=1)
WHY = "the straggler of job train/llm: 1.50x its usual step time in 3 reports in a row"


def straggling(view: NodeView, node_status: GPUNodeStatus, why: str = WHY) -> NodeState:
    return dataclasses.replace(state(view, node_status), straggler=why)


def of(kind: type[K], actions: tuple[a.Action, ...]) -> list[K]:
    return [x for x in actions if isinstance(x, kind)]


def test_a_healthy_straggler_becomes_suspect_and_is_cordoned() -> None:
    busy = node(pods=(pod("trainer-0"),))
    decision = decide(state=straggling(busy, status()), policy=policy(), fleet=fleet(), now=T0)
    assert decision.phase is Phase.SUSPECT
    assert decision.status.reason == STRAGGLER_REASON == "Straggler"
    assert decision.status.message == WHY
    cordons = of(a.Cordon, decision.actions)
    assert [c.taint for c in cordons] == [QUARANTINE_TAINT]
    assert not of(a.Evict, decision.actions)  # the drain waits for the job's checkpoint
    assert not of(a.ReleaseSpare, decision.actions)  # no spares here


def test_a_straggler_taken_out_reserves_a_spare_for_its_job() -> None:
    busy = node(pods=(pod("trainer-0"),))
    decision = decide(
        state=straggling(busy, status()),
        policy=policy(spares={"count": 1}),
        fleet=fleet(spares=("gpu-node-0099",), spare=1),
        now=T0,
    )
    assert decision.phase is Phase.SUSPECT
    reserved = of(a.ReserveSpare, decision.actions)
    assert [(r.node, r.job) for r in reserved] == [("gpu-node-0099", "train.llm")]
    assert STRAGGLER_REASON in reserved[0].message
    assert not of(a.ReleaseSpare, decision.actions)


def test_a_healthy_node_no_job_names_stays_healthy() -> None:
    busy = node(pods=(pod("trainer-0"),))
    decision = decide(
        state=straggling(busy, status(), why=""), policy=policy(), fleet=fleet(), now=T0
    )
    assert decision.phase is Phase.HEALTHY
    assert not of(a.Cordon, decision.actions)


def test_a_failing_check_wins_over_the_straggler_verdict() -> None:
    busy = node(pods=(pod("trainer-0"),))
    decision = decide(
        state=straggling(busy, status(checks=report(finding(FaultClass.FATAL)))),
        policy=policy(),
        fleet=fleet(),
        now=T0,
    )
    assert decision.phase is Phase.QUARANTINED
    assert decision.status.reason != STRAGGLER_REASON


def test_the_breaker_keeps_a_straggler_in_service_and_says_why_once() -> None:
    crowded = fleet(total=10, quarantined=1)
    busy = node(pods=(pod("trainer-0"),))
    first = decide(state=straggling(busy, status()), policy=policy(), fleet=crowded, now=T0)
    assert first.phase is Phase.HEALTHY
    assert not of(a.Cordon, first.actions)
    records = of(a.Record, first.actions)
    assert [r.reason for r in records] == ["CircuitBreakerOpen"]
    assert STRAGGLER_REASON in records[0].message
    admitted = next(c for c in first.status.conditions if c.type == "Admitted")
    assert admitted.reason == "CircuitBreakerOpen"
    again = decide(state=straggling(busy, first.status), policy=policy(), fleet=crowded, now=LATER)
    assert again.phase is Phase.HEALTHY
    assert again.actions == ()


def test_max_unhealthy_keeps_a_straggler_in_service() -> None:
    busy = node(pods=(pod("trainer-0"),))
    decision = decide(
        state=straggling(busy, status()),
        policy=policy(safety={"maxUnhealthy": 2}),
        fleet=fleet(total=100, suspect=1, draining=1),
        now=T0,
    )
    assert decision.phase is Phase.HEALTHY
    admitted = next(c for c in decision.status.conditions if c.type == "Admitted")
    assert admitted.reason == "CircuitBreakerOpen"
    room = decide(
        state=straggling(busy, status()),
        policy=policy(safety={"maxUnhealthy": 3}),
        fleet=fleet(total=100, suspect=1, draining=1),
        now=T0,
    )
    assert room.phase is Phase.SUSPECT


def suspect_straggler() -> GPUNodeStatus:
    return status(Phase.SUSPECT, reason=STRAGGLER_REASON, message=WHY)


def test_a_suspect_straggler_whose_verdict_is_gone_stays_suspect() -> None:
    """Once cordoned, the node leaves its job's judged nodes, so the verdict goes: that
    is no sign the node is fast again. A validation after the drain decides."""
    cordoned = pitcrew_cordoned(node(pods=(pod("trainer-0"),)), QUARANTINE_TAINT)
    decision = decide(
        state=straggling(cordoned, suspect_straggler(), why=""),
        policy=policy(),
        fleet=fleet(suspect=1),
        now=LATER,
    )
    assert decision.phase is Phase.SUSPECT
    assert decision.status.reason == STRAGGLER_REASON
    assert not of(a.Uncordon, decision.actions)
    assert "FaultCleared" not in [r.reason for r in of(a.Record, decision.actions)]


def test_a_suspect_of_another_degraded_reason_still_clears() -> None:
    cordoned = pitcrew_cordoned(node(pods=(pod("trainer-0"),)), QUARANTINE_TAINT)
    other = status(Phase.SUSPECT, reason="nvlink", message="nvlink degraded")
    decision = decide(
        state=straggling(cordoned, other, why=""),
        policy=policy(),
        fleet=fleet(suspect=1),
        now=LATER,
    )
    assert decision.phase is Phase.HEALTHY
    assert decision.status.reason == "FaultCleared"


@pytest.mark.parametrize(
    ("checkpoint_at", "drained"),
    [(T0 - datetime.timedelta(minutes=5), False), (LATER, True)],
    ids=["checkpoint before it was taken out", "the job's next checkpoint"],
)
def test_a_suspect_straggler_drains_after_its_jobs_next_checkpoint(
    checkpoint_at: datetime.datetime, drained: bool
) -> None:
    cordoned = pitcrew_cordoned(
        node(pods=(pod("trainer-0", checkpoint_at=checkpoint_at),)), QUARANTINE_TAINT
    )
    decision = decide(
        state=straggling(cordoned, suspect_straggler(), why=""),
        policy=policy(),
        fleet=fleet(suspect=1),
        now=LATER,
    )
    assert decision.phase is (Phase.DRAINING if drained else Phase.SUSPECT)
    assert decision.status.reason == STRAGGLER_REASON
    evicted = [p.name for x in of(a.Evict, decision.actions) for p in x.pods]
    assert evicted == (["trainer-0"] if drained else [])


def test_a_suspect_straggler_does_not_drain_before_its_cordon_is_seen() -> None:
    uncordoned = node(pods=(pod("trainer-0", checkpoint_at=LATER),))
    decision = decide(
        state=straggling(uncordoned, suspect_straggler(), why=""),
        policy=policy(),
        fleet=fleet(suspect=1),
        now=LATER,
    )
    assert decision.phase is Phase.SUSPECT
    assert [c.taint for c in of(a.Cordon, decision.actions)] == [QUARANTINE_TAINT]
    assert not of(a.Evict, decision.actions)


def test_taken_out_then_checkpointed_the_straggler_drains() -> None:
    """The whole path: Healthy -> Suspect (cordon planned), the cordon lands and the
    verdict goes, the job checkpoints, the node drains."""
    busy = node(pods=(pod("trainer-0"),))
    first = decide(state=straggling(busy, status()), policy=policy(), fleet=fleet(), now=T0)
    assert first.phase is Phase.SUSPECT
    checkpointed = pitcrew_cordoned(
        node(pods=(pod("trainer-0", checkpoint_at=LATER),)), QUARANTINE_TAINT
    )
    second = decide(
        state=straggling(checkpointed, first.status, why=""),
        policy=policy(),
        fleet=fleet(suspect=1),
        now=LATER,
    )
    assert second.phase is Phase.DRAINING
    assert of(a.Evict, second.actions)

"""The operator's own pod leaves its node's drain last: alone, once nothing else is left
to move (the executor writes that status before the eviction ends the operator)."""

from __future__ import annotations

import dataclasses
import datetime

from gpuhealth.report import FaultClass
from pitcrew.api.gpunode import DrainStatus, Phase
from pitcrew.api.vocabulary import QUARANTINE_TAINT
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

OPERATOR = dataclasses.replace(
    pod("pitcrew-operator-0", owner="ReplicaSet", job=""), namespace="pitcrew-system", operator=True
)


def draining(*pods: PodView, minutes: int = 1, on_timeout: str = "wait") -> Decision:
    view = pitcrew_cordoned(node(pods=pods), QUARANTINE_TAINT)
    current = status(
        Phase.DRAINING, checks=report(finding(FaultClass.FATAL)), drain=DrainStatus(started_at=T0)
    )
    return decide(
        state=state(view, current),
        policy=policy(safety={"drain": {"onTimeout": on_timeout}}),
        fleet=fleet(draining=1),
        now=T0 + datetime.timedelta(minutes=minutes),
    )


def moved(decision: Decision) -> list[tuple[type, list[str]]]:
    return [
        (type(x), [p.name for p in x.pods])
        for x in decision.actions
        if isinstance(x, a.Evict | a.ForceDelete)
    ]


def test_while_other_pods_are_on_the_node_the_operator_is_not_evicted() -> None:
    decision = draining(pod("trainer-0"), OPERATOR)
    assert moved(decision) == [(a.Evict, ["trainer-0"])]
    assert decision.status.drain is not None
    assert decision.status.drain.pending == ["train/trainer-0", "pitcrew-system/pitcrew-operator-0"]


def test_nor_while_an_evicted_pod_is_still_terminating() -> None:
    leaving = dataclasses.replace(pod("trainer-0"), terminating=True)
    assert moved(draining(leaving, OPERATOR)) == []


def test_once_it_is_the_last_it_is_evicted_alone() -> None:
    decision = draining(OPERATOR)
    assert moved(decision) == [(a.Evict, ["pitcrew-operator-0"])]
    assert decision.phase is Phase.DRAINING
    (evict,) = [x for x in decision.actions if isinstance(x, a.Evict)]
    assert "own pod" in evict.message


def test_a_forced_drain_deletes_the_others_first_too() -> None:
    decision = draining(pod("trainer-0"), OPERATOR, minutes=61, on_timeout="force")
    assert moved(decision) == [(a.ForceDelete, ["trainer-0"])]


def test_gone_the_drain_is_done() -> None:
    assert draining().phase is not Phase.DRAINING

"""A node a hung job is blamed on: quarantined at once (the job is already stopped, no
checkpoint will come), through the breaker like any fault."""

from __future__ import annotations

import dataclasses

from pitcrew.api.gpunode import Phase
from pitcrew.api.vocabulary import HANG_REASON, QUARANTINE_TAINT
from pitcrew.core import actions as a
from pitcrew.core.lifecycle import decide
from support.lifecycle_data import T0, fleet, node, pod, policy, state, status

WHY = "job train/llm hung: no rank stepped for 75s; rank 8 stopped first"


def test_a_node_blamed_for_a_hang_is_quarantined_with_reason_hang() -> None:
    busy = node(pods=(pod("trainer-0"),))
    blamed = dataclasses.replace(state(busy, status()), hang=WHY)
    decision = decide(state=blamed, policy=policy(), fleet=fleet(), now=T0)
    assert decision.phase is Phase.QUARANTINED
    assert decision.status.reason == HANG_REASON == "Hang"
    assert decision.status.message == WHY
    assert [c.taint for c in decision.actions if isinstance(c, a.Cordon)] == [QUARANTINE_TAINT]


def test_a_node_blamed_for_a_hang_stays_in_service_past_max_unhealthy() -> None:
    busy = node(pods=(pod("trainer-0"),))
    blamed = dataclasses.replace(state(busy, status()), hang=WHY)
    full = fleet(quarantined=1)
    decision = decide(state=blamed, policy=policy(safety={"maxUnhealthy": 1}), fleet=full, now=T0)
    assert decision.phase is Phase.HEALTHY
    assert any(isinstance(x, a.Record) and HANG_REASON in x.message for x in decision.actions)

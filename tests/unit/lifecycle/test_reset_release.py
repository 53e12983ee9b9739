"""A GPU reset waits for the node's agent to let go of the GPUs, for a bounded time.

``nvidia-smi -r`` is refused while any process holds a device open, the agent's NVML
handles included: the reset Job is created once the agent says it closed NVML for this
rung (``status.checks.released``), or once ``RELEASE_WAIT`` passed without an answer.
"""

from __future__ import annotations

import datetime

from gpuhealth.report import FaultClass
from pitcrew.api.gpunode import GPUNodeStatus, Phase, RemediationStatus
from pitcrew.api.policy import RemediationAction
from pitcrew.api.vocabulary import QUARANTINE_TAINT
from pitcrew.core import actions as a
from pitcrew.core.lifecycle import decide
from pitcrew.core.lifecycle.remediating import RELEASE_WAIT
from support.lifecycle_data import (
    T0,
    finding,
    fleet,
    node,
    pitcrew_cordoned,
    policy,
    report,
    state,
    status,
)

CORDONED = pitcrew_cordoned(node(), QUARANTINE_TAINT)
LADDER = {"remediation": {"ladders": {"fatal": [{"action": "reset-gpu", "timeout": "10m"}]}}}


def awaiting(*, released: str = "") -> GPUNodeStatus:
    checks = report(finding(FaultClass.FATAL)).model_copy(update={"released": released})
    return status(
        Phase.REMEDIATING,
        checks=checks,
        remediation=RemediationStatus(
            action=RemediationAction.RESET_GPU,
            fault_class=FaultClass.FATAL,
            step=0,
            attempt=1,
            started_at=T0,
            reference="fix-1",
            awaiting_release=True,
        ),
        remediations=[T0],
    )


def remediates(decision_actions: list[a.Action]) -> list[a.Remediate]:
    return [x for x in decision_actions if isinstance(x, a.Remediate)]


def test_a_reset_rung_asks_the_agent_to_release_before_any_job_is_created() -> None:
    draining = status(Phase.DRAINING, checks=report(finding(FaultClass.FATAL)))
    now = T0 + datetime.timedelta(minutes=5)
    decision = decide(
        state=state(CORDONED, draining), policy=policy(**LADDER), fleet=fleet(draining=1), now=now
    )
    assert decision.phase is Phase.REMEDIATING
    assert decision.status.remediation is not None
    assert decision.status.remediation.awaiting_release
    assert remediates(decision.actions) == []
    assert "ReleaseRequested" in [x.reason for x in decision.actions if isinstance(x, a.Record)]
    assert decision.wake_at == now + RELEASE_WAIT


def test_the_reset_job_is_created_once_the_agent_released_this_rung() -> None:
    now = T0 + datetime.timedelta(seconds=2)
    decision = decide(
        state=state(CORDONED, awaiting(released="fix-1")),
        policy=policy(**LADDER),
        fleet=fleet(remediating=1),
        now=now,
    )
    (remediate,) = remediates(decision.actions)
    assert (remediate.key, remediate.gpus) == ("fix-1", (3,))
    assert "released" in remediate.message
    assert decision.status.remediation is not None
    assert not decision.status.remediation.awaiting_release


def test_a_release_for_another_rung_does_not_open_this_one() -> None:
    now = T0 + datetime.timedelta(seconds=2)
    decision = decide(
        state=state(CORDONED, awaiting(released="fix-0")),
        policy=policy(**LADDER),
        fleet=fleet(remediating=1),
        now=now,
    )
    assert remediates(decision.actions) == []
    assert decision.wake_at == T0 + RELEASE_WAIT


def test_an_agent_that_never_answers_holds_the_reset_only_for_the_release_wait() -> None:
    decision = decide(
        state=state(CORDONED, awaiting()),
        policy=policy(**LADDER),
        fleet=fleet(remediating=1),
        now=T0 + RELEASE_WAIT,
    )
    (remediate,) = remediates(decision.actions)
    assert "did not release" in remediate.message


def test_a_dry_run_creates_no_reset_job_after_the_release() -> None:
    decision = decide(
        state=state(CORDONED, awaiting(released="fix-1")),
        policy=policy(**LADDER),
        fleet=fleet(remediating=1),
        now=T0 + RELEASE_WAIT,
        dry_run=True,
    )
    assert remediates(decision.actions) == []

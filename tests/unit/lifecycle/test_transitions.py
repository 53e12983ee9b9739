"""Every phase transition of the node lifecycle, as pure decisions."""

from __future__ import annotations

import dataclasses
import datetime

from gpuhealth.report import CheckResult, CheckStatus, FaultClass
from pitcrew.api.gpunode import DrainStatus, GPUNodeStatus, Phase, RemediationStatus
from pitcrew.api.policy import RemediationAction
from pitcrew.api.vocabulary import QUARANTINE_TAINT, RETIRED_TAINT, SPARE_TAINT, VALIDATING_TAINT
from pitcrew.core import actions as a
from pitcrew.core.lifecycle import decide
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

LATER = T0 + datetime.timedelta(minutes=1)
FATAL, DEGRADED = FaultClass.FATAL, FaultClass.DEGRADED


def kinds(actions: tuple[a.Action, ...]) -> list[type]:
    return [type(x) for x in actions if not isinstance(x, a.Record)]


def test_no_report_yet_stays_pending() -> None:
    decision = decide(state=state(node(), GPUNodeStatus()), policy=policy(), fleet=fleet(), now=T0)
    assert decision.phase is Phase.PENDING
    assert decision.status.reason == "WaitingForAgent"
    assert kinds(decision.actions) == []


def test_node_in_service_before_the_policy_is_adopted_without_burn_in() -> None:
    decision = decide(
        state=state(node(), status(Phase.PENDING)), policy=policy(), fleet=fleet(), now=T0
    )
    assert decision.phase is Phase.HEALTHY
    assert decision.status.reason == "Adopted"
    assert kinds(decision.actions) == []


def test_node_joining_later_is_burned_in() -> None:
    new = node(created=T0)
    decision = decide(
        state=state(new, status(Phase.PENDING)), policy=policy(), fleet=fleet(), now=T0
    )
    assert decision.phase is Phase.VALIDATING
    assert kinds(decision.actions) == [a.Cordon, a.StartProbe]


def test_passed_validation_returns_the_node_to_service() -> None:
    view = pitcrew_cordoned(node(), VALIDATING_TAINT)
    checks = report(at=LATER, suite="standard")
    decision = decide(
        state=state(view, status(Phase.VALIDATING, probe=checks)),
        policy=policy(),
        fleet=fleet(),
        now=LATER,
    )
    assert decision.phase is Phase.HEALTHY
    assert kinds(decision.actions) == [a.Uncordon]


def test_validated_node_held_as_a_spare_is_uncordoned_before_it_is_tainted() -> None:
    view = pitcrew_cordoned(node(), VALIDATING_TAINT)
    decision = decide(
        state=state(view, status(Phase.VALIDATING, probe=report(at=LATER, suite="standard"))),
        policy=policy(spares={"count": 1}),
        fleet=fleet(),
        now=LATER,
    )
    assert decision.phase is Phase.SPARE
    assert kinds(decision.actions) == [a.Uncordon, a.SetTaint]


def test_healthy_node_left_cordoned_by_pitcrew_is_uncordoned() -> None:
    view = pitcrew_cordoned(node(), VALIDATING_TAINT)
    decision = decide(state=state(view, status()), policy=policy(), fleet=fleet(), now=T0)
    assert decision.phase is Phase.HEALTHY
    assert kinds(decision.actions) == [a.Uncordon]


def test_healthy_node_cordoned_by_someone_else_is_left_cordoned() -> None:
    decision = decide(
        state=state(node(cordoned_by="kubectl"), status()), policy=policy(), fleet=fleet(), now=T0
    )
    assert kinds(decision.actions) == []


def test_failed_validation_quarantines_then_remediates_once_the_cordon_is_seen() -> None:
    view = pitcrew_cordoned(node(), VALIDATING_TAINT)
    checks = report(finding(DEGRADED, name="gemm"), at=LATER, suite="standard")
    first = decide(
        state=state(view, status(Phase.VALIDATING, probe=checks)),
        policy=policy(),
        fleet=fleet(),
        now=LATER,
    )
    assert first.phase is Phase.QUARANTINED
    assert kinds(first.actions) == [a.Cordon]  # no rung while the cordon is unseen
    cordoned = pitcrew_cordoned(node(), VALIDATING_TAINT, QUARANTINE_TAINT)
    second = decide(state=state(cordoned, first.status), policy=policy(), fleet=fleet(), now=LATER)
    # An idle node drains in no time: it goes straight on to its remediation.
    assert second.phase is Phase.REMEDIATING
    assert second.status.remediation is not None  # the rung started (a reset: it asks the
    assert a.Cordon not in kinds(second.actions)  # agent to release first, test_reset_release)


def test_fatal_finding_quarantines_and_drains_once_the_cordon_is_seen() -> None:
    view = node(pods=(pod("trainer-0"),))
    first = decide(
        state=state(view, status(checks=report(finding(FATAL)))),
        policy=policy(),
        fleet=fleet(),
        now=T0,
    )
    assert first.phase is Phase.QUARANTINED
    assert kinds(first.actions) == [a.Cordon]
    cordon = next(x for x in first.actions if isinstance(x, a.Cordon))
    assert cordon.taint == QUARANTINE_TAINT
    cordoned = pitcrew_cordoned(view, QUARANTINE_TAINT)
    second = decide(state=state(cordoned, first.status), policy=policy(), fleet=fleet(), now=T0)
    assert second.phase is Phase.DRAINING
    assert kinds(second.actions) == [a.Evict]


def test_degraded_finding_makes_the_node_suspect_and_waits_for_a_checkpoint() -> None:
    view = node(pods=(pod("trainer-0"),))
    decision = decide(
        state=state(view, status(checks=report(finding(DEGRADED)))),
        policy=policy(),
        fleet=fleet(),
        now=T0,
    )
    assert decision.phase is Phase.SUSPECT
    assert kinds(decision.actions) == [a.Cordon]


def test_suspect_drains_after_the_jobs_next_checkpoint() -> None:
    cordoned = pitcrew_cordoned(
        node(pods=(pod("trainer-0", checkpoint_at=LATER),)), QUARANTINE_TAINT
    )
    suspect = status(Phase.SUSPECT, checks=report(finding(DEGRADED)))
    decision = decide(
        state=state(cordoned, suspect), policy=policy(), fleet=fleet(suspect=1), now=LATER
    )
    assert decision.phase is Phase.DRAINING
    assert kinds(decision.actions) == [a.Evict]


def test_suspect_without_checkpoint_waits_until_the_maximum_delay() -> None:
    cordoned = pitcrew_cordoned(node(pods=(pod("trainer-0"),)), QUARANTINE_TAINT)
    suspect = status(Phase.SUSPECT, checks=report(finding(DEGRADED)))
    waiting = decide(
        state=state(cordoned, suspect),
        policy=policy(),
        fleet=fleet(suspect=1),
        now=T0 + datetime.timedelta(hours=1),
    )
    assert waiting.phase is Phase.SUSPECT
    expired = decide(
        state=state(cordoned, suspect),
        policy=policy(),
        fleet=fleet(suspect=1),
        now=T0 + datetime.timedelta(hours=2, seconds=1),
    )
    assert expired.phase is Phase.DRAINING


def test_suspect_whose_fault_clears_goes_back_to_service() -> None:
    cordoned = pitcrew_cordoned(node(), QUARANTINE_TAINT)
    decision = decide(
        state=state(cordoned, status(Phase.SUSPECT)),
        policy=policy(),
        fleet=fleet(suspect=1),
        now=LATER,
    )
    assert decision.phase is Phase.HEALTHY
    assert kinds(decision.actions) == [a.Uncordon]


def test_suspect_whose_check_could_not_run_stays_suspect() -> None:
    """A transient NVML error on the check that found the fault is not the fault clearing."""
    cordoned = pitcrew_cordoned(node(), QUARANTINE_TAINT)
    unread = CheckResult(name="nvlink", status=CheckStatus.ERROR, gpu=0, message="NVML nvlink")
    decision = decide(
        state=state(cordoned, status(Phase.SUSPECT, checks=report(unread))),
        policy=policy(),
        fleet=fleet(suspect=1),
        now=LATER,
    )
    assert decision.phase is not Phase.HEALTHY  # it carries on as Suspect: here, drains
    assert a.Uncordon not in kinds(decision.actions)


def test_drained_node_starts_the_first_rung_of_its_ladder() -> None:
    cordoned = pitcrew_cordoned(node(), QUARANTINE_TAINT)
    draining = status(Phase.DRAINING, checks=report(finding(FATAL)))
    decision = decide(
        state=state(cordoned, draining), policy=policy(), fleet=fleet(draining=1), now=LATER
    )
    assert decision.phase is Phase.REMEDIATING
    rung = decision.status.remediation
    assert rung is not None
    assert (rung.action, rung.step, rung.attempt) == (RemediationAction.RESET_GPU, 0, 1)
    # A reset's Job waits for the agent to close NVML: the next decision creates it.
    assert rung.awaiting_release
    released = decision.status.checks.model_copy(update={"released": rung.reference})
    after = decide(
        state=state(cordoned, decision.status.model_copy(update={"checks": released})),
        policy=policy(),
        fleet=fleet(remediating=1),
        now=LATER,
    )
    remediate = next(x for x in after.actions if isinstance(x, a.Remediate))
    assert (remediate.key, remediate.gpus) == (rung.reference, (3,))


def remediating(
    *,
    step: int = 0,
    attempt: int = 1,
    started: datetime.datetime = T0,
    checks: object = None,
    remediations: int = 1,
    confirmed: str = "",
) -> GPUNodeStatus:
    return status(
        Phase.REMEDIATING,
        checks=checks or report(finding(FATAL)),  # type: ignore[arg-type]
        remediation=RemediationStatus(
            action=RemediationAction.RESET_GPU,
            fault_class=FATAL,
            step=step,
            attempt=attempt,
            started_at=started,
            reference="k",
            confirmed=confirmed,
        ),
        remediations=[started] * remediations,
    )


def test_repaired_node_is_revalidated_before_it_takes_work() -> None:
    cordoned = pitcrew_cordoned(node(), QUARANTINE_TAINT)
    clean = report(at=LATER).model_copy(update={"repair": "k"})  # after the confirmed repair
    repaired = remediating(checks=clean, confirmed="reset Job k succeeded")
    decision = decide(
        state=state(cordoned, repaired), policy=policy(), fleet=fleet(remediating=1), now=LATER
    )
    assert decision.phase is Phase.VALIDATING
    assert kinds(decision.actions) == [a.Cordon, a.StartProbe]
    assert decision.status.remediation is None


def test_a_repair_its_validation_finds_wanting_goes_on_from_the_next_rung() -> None:
    """A reset that leaves the GPU failing is not a reset to try again: the node is
    drained empty after its failed validation and the ladder goes on to the reboot."""
    cordoned = pitcrew_cordoned(node(), QUARANTINE_TAINT)
    clean = report(at=LATER).model_copy(update={"repair": "k"})
    validating = decide(
        state=state(cordoned, remediating(checks=clean, confirmed="reset Job k succeeded")),
        policy=policy(),
        fleet=fleet(remediating=1),
        now=LATER,
    ).status
    assert validating.repair_under_test is not None
    assert (validating.repair_under_test.step, validating.repair_under_test.fault_class) == (
        0,
        FATAL,
    )
    failed = validating.model_copy(
        update={"phase": Phase.DRAINING, "checks": report(finding(FATAL), at=LATER)}
    )
    again = decide(
        state=state(cordoned, failed), policy=policy(), fleet=fleet(draining=1), now=LATER
    )
    assert again.status.remediation is not None
    assert again.status.remediation.action is RemediationAction.REBOOT
    assert again.status.repair_under_test is None
    # Another class of fault after the repair starts its own ladder at the first rung.
    other = failed.model_copy(update={"checks": report(finding(DEGRADED), at=LATER)})
    fresh = decide(
        state=state(cordoned, other), policy=policy(), fleet=fleet(draining=1), now=LATER
    )
    assert fresh.status.remediation is not None
    assert fresh.status.remediation.step == 0


def test_timed_out_rung_is_retried_then_escalated() -> None:
    cordoned = pitcrew_cordoned(node(), QUARANTINE_TAINT)
    after_timeout = T0 + datetime.timedelta(minutes=11)
    retry = decide(
        state=state(cordoned, remediating()),
        policy=policy(),
        fleet=fleet(remediating=1),
        now=after_timeout,
    )
    assert retry.status.remediation is not None
    assert (retry.status.remediation.step, retry.status.remediation.attempt) == (0, 2)
    escalate = decide(
        state=state(cordoned, remediating(attempt=2, remediations=2)),
        policy=policy(),
        fleet=fleet(remediating=1),
        now=after_timeout,
    )
    assert escalate.status.remediation is not None
    assert escalate.status.remediation.action is RemediationAction.REBOOT


def test_exhausted_ladder_retires_the_node() -> None:
    cordoned = pitcrew_cordoned(node(), QUARANTINE_TAINT)
    decision = decide(
        state=state(cordoned, remediating(step=1, remediations=1)),
        policy=policy(),
        fleet=fleet(remediating=1),
        now=T0 + datetime.timedelta(minutes=31),
    )
    assert decision.phase is Phase.RETIRED
    taint = next(x for x in decision.actions if isinstance(x, a.SetTaint))
    assert taint.taint == RETIRED_TAINT


def test_lemon_is_retired_instead_of_remediated_again() -> None:
    cordoned = pitcrew_cordoned(node(), QUARANTINE_TAINT)
    history = [T0 - datetime.timedelta(days=d) for d in (1, 2, 3)]
    draining = status(Phase.DRAINING, checks=report(finding(FATAL)), remediations=history)
    decision = decide(
        state=state(cordoned, draining), policy=policy(), fleet=fleet(draining=1), now=T0
    )
    assert decision.phase is Phase.RETIRED
    assert decision.status.reason == "Lemon"


def test_quarantine_releases_a_spare() -> None:
    decision = decide(
        state=state(node(), status(checks=report(finding(FATAL)))),
        policy=policy(spares={"count": 1}),
        fleet=fleet(spares=("gpu-node-0099",), spare=1),
        now=T0,
    )
    release = [x for x in decision.actions if isinstance(x, a.ReleaseSpare)]
    assert [r.node for r in release] == ["gpu-node-0099"]


def test_idle_healthy_node_becomes_a_spare_when_spares_are_missing() -> None:
    decision = decide(
        state=state(node(), status()),
        policy=policy(spares={"count": 2}),
        fleet=fleet(spares=("gpu-node-0099",), spare=1),
        now=T0,
    )
    assert decision.phase is Phase.SPARE
    taint = next(x for x in decision.actions if isinstance(x, a.SetTaint))
    assert taint.taint == SPARE_TAINT


def test_busy_node_is_not_made_a_spare() -> None:
    decision = decide(
        state=state(node(pods=(pod("trainer-0"),)), status()),
        policy=policy(spares={"count": 2}),
        fleet=fleet(),
        now=T0,
    )
    assert decision.phase is Phase.HEALTHY


def test_opted_out_node_is_excluded_and_left_alone() -> None:
    view = node(labels={"pitcrew.dev/managed": "false"})
    decision = decide(
        state=state(view, status(checks=report(finding(FATAL)))),
        policy=policy(),
        fleet=fleet(),
        now=T0,
    )
    assert decision.phase is Phase.EXCLUDED
    assert kinds(decision.actions) == []


def test_opting_out_undoes_pitcrews_cordon_taints_rung_and_reservation() -> None:
    """Every way out of a state undoes what the state did: the label hands the node back
    as a policy's deletion does (its Slurm drain: test_slurm_lifecycle)."""
    quarantined = pitcrew_cordoned(
        node(labels={"pitcrew.dev/managed": "false"}), QUARANTINE_TAINT, "pitcrew.dev/reserved"
    )
    out = remediating()
    decision = decide(state=state(quarantined, out), policy=policy(), fleet=fleet(), now=T0)
    assert decision.phase is Phase.EXCLUDED
    (lift,) = [x for x in decision.actions if isinstance(x, a.Uncordon)]
    assert lift.reason == "OptedOut"
    assert decision.status.remediation is None  # the agent opens NVML again
    # A person's cordon, with no mark of Pitcrew's: left as it is.
    theirs = dataclasses.replace(node(labels={"pitcrew.dev/managed": "false"}), unschedulable=True)
    kept = decide(state=state(theirs, out), policy=policy(), fleet=fleet(), now=T0)
    assert kinds(kept.actions) == []


def test_paused_policy_decides_nothing() -> None:
    decision = decide(
        state=state(node(), status(checks=report(finding(FATAL)))),
        policy=policy(safety={"paused": True}),
        fleet=fleet(),
        now=T0,
    )
    assert decision.phase is Phase.HEALTHY
    assert decision.actions == ()


def test_breaker_blocks_new_quarantines_and_says_why_once() -> None:
    sick = state(node(), status(checks=report(finding(FATAL))))
    crowded = fleet(total=10, quarantined=1)
    first = decide(state=sick, policy=policy(), fleet=crowded, now=T0)
    assert first.phase is Phase.HEALTHY
    records = [x for x in first.actions if isinstance(x, a.Record)]
    assert [r.reason for r in records] == ["CircuitBreakerOpen"]
    admitted = next(c for c in first.status.conditions if c.type == "Admitted")
    assert admitted.reason == "CircuitBreakerOpen"
    again = decide(state=state(node(), first.status), policy=policy(), fleet=crowded, now=LATER)
    assert again.actions == ()


def test_error_checks_never_quarantine_but_set_a_condition() -> None:
    broken = CheckResult(name="backend", status=CheckStatus.ERROR, message="NVML not available")
    decision = decide(
        state=state(node(), status(checks=report(broken))), policy=policy(), fleet=fleet(), now=T0
    )
    assert decision.phase is Phase.HEALTHY
    runnable = next(c for c in decision.status.conditions if c.type == "ChecksRunnable")
    assert runnable.status.value == "False"
    assert "NVML not available" in runnable.message


def test_missing_heartbeat_sets_a_condition() -> None:
    stale = status(checks=report(at=T0))
    decision = decide(
        state=state(node(), stale),
        policy=policy(),
        fleet=fleet(),
        now=T0 + datetime.timedelta(minutes=16),
    )
    reporting = next(c for c in decision.status.conditions if c.type == "AgentReporting")
    assert reporting.reason == "HeartbeatMissing"


def test_drain_timeout_force_deletes_the_remaining_pods() -> None:
    cordoned = pitcrew_cordoned(node(pods=(pod("stuck"),)), QUARANTINE_TAINT)
    draining = status(
        Phase.DRAINING, checks=report(finding(FATAL)), drain=DrainStatus(started_at=T0)
    )
    later = T0 + datetime.timedelta(minutes=31)
    forced = decide(
        state=state(cordoned, draining),
        policy=policy(safety={"drain": {"onTimeout": "force"}}),
        fleet=fleet(draining=1),
        now=later,
    )
    assert kinds(forced.actions) == [a.ForceDelete]
    escalated = decide(
        state=state(cordoned, draining), policy=policy(), fleet=fleet(draining=1), now=later
    )
    assert escalated.phase is Phase.REMEDIATING


def test_phase_changes_are_recorded_in_history() -> None:
    busy = node(pods=(pod("trainer-0"),))
    decision = decide(
        state=state(busy, status(checks=report(finding(DEGRADED)))),
        policy=policy(),
        fleet=fleet(),
        now=T0,
    )
    assert [(h.from_phase, h.to_phase) for h in decision.status.history] == [
        (Phase.HEALTHY, Phase.SUSPECT)
    ]


def test_the_policys_checks_are_published_to_the_agent_when_they_differ() -> None:
    tuned = policy(checks={"interval": "10s", "thresholds": {"ib.expected_rate_gbps": 800}})
    healthy = dataclasses.replace(node(), gpus=8)
    decision = decide(
        state=state(healthy, status(Phase.HEALTHY)), policy=tuned, fleet=fleet(), now=T0
    )
    published = [x for x in decision.actions if isinstance(x, a.PublishChecks)]
    assert len(published) == 1
    checks = published[0].checks
    assert (checks.policy, checks.interval, checks.expected_gpus) == (
        "fleet",
        datetime.timedelta(seconds=10),
        8,  # the node's capacity, as the policy names no count
    )
    assert checks.thresholds == {"ib.expected_rate_gbps": 800}
    again = decide(
        state=state(healthy, status(Phase.HEALTHY), checks=checks),
        policy=tuned,
        fleet=fleet(),
        now=T0,
    )
    assert not any(isinstance(x, a.PublishChecks) for x in again.actions)


def test_unreadable_kernel_log_lines_raise_a_condition_and_nothing_else() -> None:
    partial = CheckResult(
        name="kernel-log",
        status=CheckStatus.WARN,
        fault_class=FaultClass.WATCH,
        message="/dev/kmsg: 1 unreadable NVRM line (line 2)",
    )
    decision = decide(
        state=state(node(), status(Phase.HEALTHY, checks=report(partial))),
        policy=policy(),
        fleet=fleet(),
        now=T0,
    )
    assert decision.phase is Phase.HEALTHY
    condition = next(c for c in decision.status.conditions if c.type == "KernelLogRead")
    assert (condition.status, condition.reason) == ("False", "LinesUnreadable")
    assert "line 2" in condition.message

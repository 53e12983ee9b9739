"""A rung is judged by evidence that the repair happened, and by reports made after it."""

from __future__ import annotations

import datetime
from dataclasses import replace

from gpuhealth.report import FaultClass
from pitcrew.api.gpunode import Phase, RemediationStatus
from pitcrew.api.policy import RemediationAction
from pitcrew.api.vocabulary import QUARANTINE_TAINT
from pitcrew.core import actions as a
from pitcrew.core.evidence import repair_evidence
from pitcrew.core.lifecycle import decide
from pitcrew.core.views import NodeView, PodView
from support.lifecycle_data import T0, fleet, node, pitcrew_cordoned, policy, report, state, status

LATER = T0 + datetime.timedelta(minutes=2)
REBOOT = [{"action": "reboot", "timeout": "30m"}]


def cordoned(*, boot_id: str = "boot-1", pods: tuple[PodView, ...] = ()) -> NodeView:
    return replace(pitcrew_cordoned(node(pods=pods), QUARANTINE_TAINT), boot_id=boot_id)


def rung(action: RemediationAction, *, confirmed: str = "") -> RemediationStatus:
    return RemediationStatus(
        action=action,
        fault_class=FaultClass.FATAL,
        step=0,
        attempt=1,
        started_at=T0,
        reference="fix-1",
        boot_id="boot-1",
        confirmed=confirmed,
    )


def reset_pod(*, succeeded: bool) -> PodView:
    return PodView("pitcrew-system", "fix-1-x", "Job", probe=True, job_name="fix-1",
                   finished=True, succeeded=succeeded)  # fmt: skip


def test_a_started_reboot_is_not_evidence_a_new_boot_id_is() -> None:
    assert repair_evidence(cordoned(boot_id="boot-1"), rung(RemediationAction.REBOOT)) == ""
    said = repair_evidence(cordoned(boot_id="boot-2"), rung(RemediationAction.REBOOT))
    assert "rebooted" in said


def test_a_reset_counts_only_when_its_job_succeeded_on_the_node() -> None:
    failed = cordoned(pods=(reset_pod(succeeded=False),))
    assert repair_evidence(failed, rung(RemediationAction.RESET_GPU)) == ""
    done = cordoned(pods=(reset_pod(succeeded=True),))
    assert "succeeded" in repair_evidence(done, rung(RemediationAction.RESET_GPU))


def test_evidence_is_confirmed_to_the_agent_once() -> None:
    remediating = status(
        Phase.REMEDIATING, checks=report(), remediation=rung(RemediationAction.REBOOT)
    )
    decision = decide(
        state=state(cordoned(boot_id="boot-2"), remediating),
        policy=policy(remediation={"ladders": {"fatal": REBOOT}}),
        fleet=fleet(remediating=1),
        now=LATER,
    )
    (confirm,) = [x for x in decision.actions if isinstance(x, a.ConfirmRepair)]
    assert confirm.key == "fix-1"
    assert decision.status.remediation is not None
    assert decision.status.remediation.confirmed
    assert decision.phase is Phase.REMEDIATING  # no report after the repair yet
    again = decide(
        state=state(cordoned(boot_id="boot-2"), decision.status),
        policy=policy(remediation={"ladders": {"fatal": REBOOT}}),
        fleet=fleet(remediating=1),
        now=LATER,
    )
    assert not [x for x in again.actions if isinstance(x, a.ConfirmRepair)]


def test_a_healthy_report_without_the_repair_key_does_not_end_the_rung() -> None:
    # The agent's clock says the report is newer than the rung: that is not evidence.
    future = report(at=LATER + datetime.timedelta(hours=1))
    remediating = status(
        Phase.REMEDIATING,
        checks=future,
        remediation=rung(RemediationAction.REBOOT, confirmed="rebooted"),
    )
    decision = decide(
        state=state(cordoned(boot_id="boot-2"), remediating),
        policy=policy(remediation={"ladders": {"fatal": REBOOT}}),
        fleet=fleet(remediating=1),
        now=LATER,
    )
    assert decision.phase is Phase.REMEDIATING
    acked = remediating.model_copy(
        update={"checks": report(at=T0 - datetime.timedelta(hours=1)).model_copy(
            update={"repair": "fix-1"})}
    )  # fmt: skip
    repaired = decide(
        state=state(cordoned(boot_id="boot-2"), acked),
        policy=policy(remediation={"ladders": {"fatal": REBOOT}}),
        fleet=fleet(remediating=1),
        now=LATER,
    )
    assert repaired.phase is Phase.VALIDATING  # a node clock behind changes nothing


RESET = [{"action": "reset-gpu", "timeout": "30m"}]


def resumed(
    action: RemediationAction, ladder: list[dict[str, str]], **known: bool
) -> list[a.Remediate]:
    """The Remediate actions a leader decides for a rung another process recorded."""
    remediating = status(Phase.REMEDIATING, checks=report(), remediation=rung(action))
    decision = decide(
        state=replace(state(cordoned(), remediating), **known),
        policy=policy(remediation={"ladders": {"fatal": ladder}}),
        fleet=fleet(remediating=1),
        now=LATER,
    )
    return [x for x in decision.actions if isinstance(x, a.Remediate)]


def test_a_new_leader_resumes_an_idempotent_rung_with_its_key() -> None:
    """The old leader recorded the reset and died (or lost the apiserver) before the
    Job was created: the new leader creates it under the same name, so a Job that
    does exist is found, never doubled."""
    (resume,) = resumed(RemediationAction.RESET_GPU, RESET, rung_started=False)
    assert (resume.key, resume.step, resume.attempt) == ("fix-1", 0, 1)
    assert resume.reason == "RemediationResumed"


def test_a_reboot_is_never_started_twice_by_a_new_leader() -> None:
    assert resumed(RemediationAction.REBOOT, REBOOT, rung_started=False) == []


def test_the_leader_that_started_a_rung_does_not_start_it_again() -> None:
    assert resumed(RemediationAction.RESET_GPU, RESET) == []

"""``gpuhealth slurm``: the reason it drains with, how it reads a Slurm node
(``scontrol -o show node`` lines captured from Slurm 22.05 and 24.11,
tests/unit/slurm/data), and that it never touches a node out for another reason."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from gpuhealth.report import CheckResult, CheckStatus, FaultClass, Report
from gpuhealth.slurm import REASON_LIMIT, act, drain_reason, parse_node_line

DATA = Path(__file__).parents[1] / "slurm" / "data"


def failed(name: str, gpu: int | None, fault: FaultClass, message: str) -> CheckResult:
    return CheckResult(
        name=name, status=CheckStatus.FAIL, gpu=gpu, fault_class=fault, message=message
    )


def test_the_reason_names_the_worst_finding_and_counts_the_rest() -> None:
    checks = [
        CheckResult(name="gpu-count", status=CheckStatus.PASS),
        failed("ecc-sbe", 1, FaultClass.DEGRADED, "SBE rate 40/h"),
        failed("xid", 2, FaultClass.FATAL, "XID 79: GPU has fallen off the bus"),
    ]
    assert (
        drain_reason(checks) == "gpuhealth: xid gpu2: XID 79: GPU has fallen off the bus (+1 more)"
    )


def test_nothing_to_drain_for_passes_errors_or_findings_that_take_nothing_out() -> None:
    checks = [
        CheckResult(name="nvml", status=CheckStatus.ERROR, message="NVML not found"),
        failed("temperature", 0, FaultClass.NONE, "warm"),
    ]
    assert drain_reason(checks) == ""


def test_a_long_or_multi_line_message_becomes_one_bounded_line() -> None:
    reason = drain_reason(
        [failed("dcgm", None, FaultClass.FATAL, "line one\nline two " + "x" * 500)]
    )
    assert "\n" not in reason
    assert len(reason) <= REASON_LIMIT
    assert reason.startswith("gpuhealth: dcgm: line one line two")


@pytest.mark.parametrize(
    ("capture", "state", "reason"),
    [
        ("scontrol-show-node-idle.txt", "IDLE", ""),
        ("scontrol-show-node-draining.txt", "ALLOCATED+DRAIN", "pitcrew-maintenance"),
        ("scontrol-show-node-drained.txt", "IDLE+DRAIN", "pitcrew-maintenance"),
        ("scontrol-show-node-reason-with-spaces.txt", "IDLE+DRAIN", "pitcrew: Xid 79 on GPU 3"),
        ("scontrol-show-node-24.11-idle.txt", "IDLE", ""),
        ("scontrol-show-node-24.11-draining.txt", "ALLOCATED+DRAIN", "pitcrew-maintenance"),
        ("scontrol-show-node-24.11-down.txt", "DOWN", "pitcrew-maintenance"),
        (
            "scontrol-show-node-24.11-reason-with-spaces.txt",
            "IDLE+DRAIN",
            "pitcrew: Xid 79 on GPU 3",
        ),
    ],
)
def test_state_and_reason_of_real_scontrol_lines(capture: str, state: str, reason: str) -> None:
    assert parse_node_line((DATA / capture).read_text()) == (state, reason)


FALLEN_OFF = [failed("xid", 2, FaultClass.FATAL, "XID 79: GPU has fallen off the bus")]
NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
PASSING = [CheckResult(name="gpu-count", status=CheckStatus.PASS)]
FAKE_SCONTROL = """#!/bin/sh
# What scontrol -o show node prints for one node; each update is logged, not done.
if [ "$1" = "-o" ]; then
    [ -f "$0.line" ] || { echo "Unable to contact slurm controller" >&2; exit 1; }
    cat "$0.line"; exit 0
fi
echo "$@" >> "$0.updates"
"""


def scontrol_showing(tmp_path: Path, state: str | None, reason: str = "") -> Path:
    """A stand-in ``scontrol`` for a node in ``state`` with ``reason`` (None: slurmctld
    does not answer); the real daemons are in tests/e2e/slurm/test_gpuhealth_slurm.py."""
    script = tmp_path / "scontrol"
    script.write_text(FAKE_SCONTROL)
    script.chmod(0o755)
    if state is not None:
        why = f" Reason={reason} [root@2026-12-01T12:00:00]" if reason else ""
        line = f"NodeName=sn-1 Arch=x86_64 CoresPerSocket=1 State={state} Weight=1{why}\n"
        (tmp_path / "scontrol.line").write_text(line)
    return script


def updates(scontrol: Path) -> list[str]:
    log = scontrol.with_name("scontrol.updates")
    return log.read_text().splitlines() if log.exists() else []


def report_of(checks: list[CheckResult]) -> Report:
    return Report(node="sn-1", time=NOW, backend="sim", checks=checks)


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("IDLE+DRAIN", "swap the NIC, ticket 4411"),  # a person's drain
        ("MIXED+DRAIN", "pitcrew: Xid"),  # Pitcrew's
        ("DOWN", "bad cable"),
        ("DOWN+NOT_RESPONDING", "Not responding"),  # Slurm's own
        ("ALLOCATED+FAIL", "failing, ticket 12"),
    ],
)
def test_a_node_out_for_another_reason_is_never_touched(
    tmp_path: Path, state: str, reason: str
) -> None:
    """Slurm replaces the reason on a drain: drained over, a person's drain would become
    gpuhealth's, and the next passing check would resume it."""
    scontrol = scontrol_showing(tmp_path, state, reason)
    assert act(report_of(FALLEN_OFF), node="sn-1", mode="healthcheck", scontrol=str(scontrol)) == 1
    assert act(report_of(PASSING), node="sn-1", mode="healthcheck", scontrol=str(scontrol)) == 0
    assert act(report_of(FALLEN_OFF), node="sn-1", mode="prolog", scontrol=str(scontrol)) == 1
    assert updates(scontrol) == []


def test_its_own_drain_is_redrained_and_resumed_unless_slurm_has_the_node_down(
    tmp_path: Path,
) -> None:
    (tmp_path / "idle").mkdir()
    idle = scontrol_showing(tmp_path / "idle", "IDLE")
    assert act(report_of(FALLEN_OFF), node="sn-1", mode="healthcheck", scontrol=str(idle)) == 1
    (drain,) = updates(idle)
    assert drain.startswith("update NodeName=sn-1 State=DRAIN Reason=gpuhealth: xid gpu2: XID 79")
    (tmp_path / "ours").mkdir()
    ours = scontrol_showing(tmp_path / "ours", "IDLE+DRAIN", "gpuhealth: xid gpu2: XID 79")
    assert act(report_of(PASSING), node="sn-1", mode="healthcheck", scontrol=str(ours)) == 0
    assert updates(ours) == ["update NodeName=sn-1 State=RESUME"]
    (tmp_path / "down").mkdir()
    down = scontrol_showing(tmp_path / "down", "DOWN+DRAIN+NOT_RESPONDING", "gpuhealth: xid gpu2")
    assert act(report_of(PASSING), node="sn-1", mode="healthcheck", scontrol=str(down)) == 0
    assert updates(down) == []


def test_a_node_whose_state_cannot_be_read_is_not_touched(tmp_path: Path) -> None:
    scontrol = scontrol_showing(tmp_path, None)
    assert act(report_of(FALLEN_OFF), node="sn-1", mode="prolog", scontrol=str(scontrol)) == 1
    assert act(report_of(PASSING), node="sn-1", mode="healthcheck", scontrol=str(scontrol)) == 2
    assert act(report_of(PASSING), node="sn-1", mode="prolog", scontrol=str(scontrol)) == 0
    assert updates(scontrol) == []

"""``gpuhealth slurm``: the reason it drains with, and how it reads a Slurm node
(``scontrol -o show node`` lines captured from Slurm 22.05, tests/unit/slurm/data)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuhealth.report import CheckResult, CheckStatus, FaultClass
from gpuhealth.slurm import REASON_LIMIT, drain_reason, parse_node_line

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
    ],
)
def test_state_and_reason_of_real_scontrol_lines(capture: str, state: str, reason: str) -> None:
    assert parse_node_line((DATA / capture).read_text()) == (state, reason)

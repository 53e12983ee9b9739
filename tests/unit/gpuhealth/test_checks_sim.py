"""Every passive check's pass and fail path, on the simulated backend.

Each fault of the vocabulary is injected into a healthy simulated node; the
report must flag exactly the expected check on the expected GPU with the
expected class, and a healthy node must pass everything. Time is virtual:
the second run happens ``WINDOW`` later, so rate checks see a rate.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Collection

import pytest

from gpuhealth.active.sim import SimProbes
from gpuhealth.backends.sim import HEALTHY_DRIVER, SimBackend
from gpuhealth.checks import PASSIVE, Expectations
from gpuhealth.faults import parse_faults
from gpuhealth.models import MODELS, get_model
from gpuhealth.report import CheckStatus, FaultClass, Report
from gpuhealth.runner import Checker
from gpuhealth.samples import GpuSample

WINDOW = datetime.timedelta(minutes=5)
START = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime.datetime:
        return self.now


def run(
    faults: str,
    *,
    model: str = "H100",
    expect: Expectations | None = None,
    disabled: Collection[str] = (),
    suite: str = "passive",
    gpus: int = 8,
) -> Report:
    clock = Clock()
    backend = SimBackend(node="n1", model=get_model(model), gpus=gpus, clock=clock)
    backend.set_faults(parse_faults(faults))
    checker = Checker(
        backend=backend,
        node="n1",
        expect=expect
        or Expectations(
            gpus=gpus, ib_ports=8, model=get_model(model), driver_version=HEALTHY_DRIVER
        ),
        disabled=disabled,
    )
    checker.run()
    clock.now += WINDOW
    report = checker.run(suite=suite, probes=SimProbes(backend))
    checker.close()
    return report


def findings(report: Report) -> set[tuple[str, int | None, CheckStatus, FaultClass]]:
    return {
        (c.name, c.gpu, c.status, c.fault_class)
        for c in report.checks
        if c.status not in (CheckStatus.PASS, CheckStatus.SKIPPED)
    }


@pytest.mark.parametrize("model", sorted(MODELS))
def test_healthy_node_passes_every_check(model: str) -> None:
    report = run("[]", model=model)
    assert report.healthy
    assert findings(report) == set()
    assert {c.name for c in report.checks} >= {
        "gpu-count",
        "xid",
        "ecc",
        "row-remap",
        "retired-pages",
        "clock-events",
        "thermal-margin",
        "pcie",
        "nvlink",
        "versions",
        "gpu-modes",
        "ib",
        "gpu-lost",
    }


FAIL, WARN = CheckStatus.FAIL, CheckStatus.WARN
FATAL, DEGRADED, WATCH = FaultClass.FATAL, FaultClass.DEGRADED, FaultClass.WATCH
APPLICATION = FaultClass.APPLICATION

CASES = {
    "xid 79": ('[{"type": "xid", "gpu": 3, "code": 79}]', ("xid", 3, FAIL, FATAL)),
    "xid 13 once": ('[{"type": "xid", "gpu": 2, "code": 13}]', ("xid", 2, WARN, APPLICATION)),
    "gpu missing": ('[{"type": "gpu-missing", "gpu": 5}]', ("gpu-count", None, FAIL, FATAL)),
    "ecc dbe": ('[{"type": "ecc-dbe", "gpu": 1, "count": 2}]', ("ecc", 1, FAIL, FATAL)),
    "sbe storm": (
        '[{"type": "ecc-sbe-storm", "gpu": 0, "per_minute": 200}]',
        ("ecc", 0, FAIL, DEGRADED),
    ),
    "sbe trickle": (
        '[{"type": "ecc-sbe-storm", "gpu": 0, "per_minute": 5}]',
        ("ecc", 0, WARN, WATCH),
    ),
    "remap pending": (
        '[{"type": "row-remap-pending", "gpu": 4}]',
        ("row-remap", 4, FAIL, DEGRADED),
    ),
    "remap failure": ('[{"type": "row-remap-failure", "gpu": 4}]', ("row-remap", 4, FAIL, FATAL)),
    "thermal": ('[{"type": "thermal-slowdown", "gpu": 6}]', ("clock-events", 6, FAIL, DEGRADED)),
    "thermal margin": (
        '[{"type": "thermal-slowdown", "gpu": 6}]',
        ("thermal-margin", 6, WARN, WATCH),
    ),
    "power brake": ('[{"type": "power-brake", "gpu": 7}]', ("clock-events", 7, FAIL, DEGRADED)),
    "pcie width": (
        '[{"type": "pcie-downtrain", "gpu": 2, "gen": 5, "width": 8}]',
        ("pcie", 2, FAIL, DEGRADED),
    ),
    "pcie gen": (
        '[{"type": "pcie-downtrain", "gpu": 2, "gen": 4, "width": 16}]',
        ("pcie", 2, WARN, WATCH),
    ),
    "nvlink down": (
        '[{"type": "nvlink-down", "gpu": 1, "link": 3}]',
        ("nvlink", 1, FAIL, DEGRADED),
    ),
    "nvlink crc": (
        '[{"type": "nvlink-crc-storm", "gpu": 1, "link": 3, "per_minute": 500}]',
        ("nvlink", 1, FAIL, DEGRADED),
    ),
    "ib down": (
        '[{"type": "ib-port-down", "port": "mlx5_3/1"}]',
        ("ib", None, FAIL, DEGRADED),
    ),
    "ib flapping": (
        '[{"type": "ib-flapping", "port": "mlx5_3/1", "per_hour": 60}]',
        ("ib", None, FAIL, DEGRADED),
    ),
    "ib port missing": (
        '[{"type": "ib-port-missing", "port": "mlx5_7/1"}]',
        ("ib", None, FAIL, DEGRADED),
    ),
    "ib rate": (
        '[{"type": "ib-rate-degraded", "port": "mlx5_2/1", "rate_gbps": 200}]',
        ("ib", None, FAIL, DEGRADED),
    ),
    "ib symbol errors": (
        '[{"type": "ib-symbol-errors", "port": "mlx5_2/1", "per_minute": 50}]',
        ("ib", None, WARN, WATCH),
    ),
    "retired pages over limit": (
        '[{"type": "retired-pages", "gpu": 5, "sbe": 40, "dbe": 30}]',
        ("retired-pages", 5, FAIL, FATAL),
    ),
    "retired page pending": (
        '[{"type": "retired-pages", "gpu": 5, "dbe": 1, "pending": true}]',
        ("retired-pages", 5, FAIL, DEGRADED),
    ),
    "pcie replays": (
        '[{"type": "pcie-replay-storm", "gpu": 2, "per_minute": 500}]',
        ("pcie", 2, WARN, WATCH),
    ),
    "fatal sxid": ('[{"type": "sxid", "code": 12020, "switch": 2}]', ("sxid", None, FAIL, FATAL)),
    "fabric registration failed": (
        '[{"type": "fabric-registration-failed", "gpu": 0}]',
        ("fabric", 0, FAIL, FATAL),
    ),
    "mig on": ('[{"type": "mig-enabled", "gpu": 0}]', ("gpu-modes", 0, WARN, WATCH)),
    "persistence off": ('[{"type": "persistence-off", "gpu": 7}]', ("gpu-modes", 7, WARN, WATCH)),
    "driver mismatch": (
        '[{"type": "driver-mismatch", "version": "550.54.15"}]',
        ("versions", None, WARN, WATCH),
    ),
}


@pytest.mark.parametrize(("faults", "expected"), CASES.values(), ids=CASES)
def test_fault_is_found_by_its_check(
    faults: str, expected: tuple[str, int | None, CheckStatus, FaultClass]
) -> None:
    found = findings(run(faults))
    assert expected in found
    # One fault, one kind of finding: nothing else on other GPUs.
    assert {f[1] for f in found if f[1] is not None} <= {expected[1]}


SIM_UNREACHABLE = {
    "gpu-lost": "a GPU that answers NVML with GPU_IS_LOST; tested on the NVML backend",
}


def test_every_passive_check_has_a_fault_that_it_finds() -> None:
    """Each check, run alone, turns at least one case's fault into the case's
    finding; a check whose fail path no fault reaches fails this test."""
    reached = set()
    for check in PASSIVE:
        others = set(PASSIVE) - {check}
        if any(
            expected in findings(run(faults, disabled=others))
            for faults, expected in CASES.values()
        ):
            reached.add(check)
    assert reached == set(PASSIVE) - set(SIM_UNREACHABLE)


PROBE_CASES = {
    "slow gemm": ('[{"type": "slow-gemm", "gpu": 4, "factor": 3}]', ("gemm", 4)),
    "slow hbm": ('[{"type": "slow-hbm", "gpu": 1, "factor": 2}]', ("hbm", 1)),
    "pcie width": (
        '[{"type": "pcie-downtrain", "gpu": 6, "gen": 5, "width": 4}]',
        ("pcie-bandwidth", 6),
    ),
    "slow nccl": ('[{"type": "slow-nccl", "factor": 2}]', ("nccl-allreduce", None)),
    "nvlink down": ('[{"type": "nvlink-down", "gpu": 1, "link": 3}]', ("nccl-allreduce", None)),
}


@pytest.mark.parametrize(("faults", "expected"), PROBE_CASES.values(), ids=PROBE_CASES)
def test_probe_finds_a_slow_part_and_only_that(
    faults: str, expected: tuple[str, int | None]
) -> None:
    probes = {"gemm", "hbm", "pcie-bandwidth", "nccl-allreduce"}
    report = run(faults, suite="full", disabled=PASSIVE)
    failed = {(c.name, c.gpu) for c in report.checks if c.status is not CheckStatus.PASS}
    assert failed == {expected}
    assert {c.name for c in report.checks} == probes
    verdict = next(c for c in report.checks if (c.name, c.gpu) == expected)
    assert verdict.fault_class is DEGRADED
    assert verdict.observed is not None
    assert verdict.threshold is not None
    assert verdict.observed < verdict.threshold


@pytest.mark.parametrize("model", sorted(MODELS))
def test_healthy_node_passes_every_probe(model: str) -> None:
    report = run("[]", model=model, suite="full", disabled=PASSIVE)
    assert report.healthy
    assert len(report.checks) == 8 * 3 + 1


def test_a_single_gpu_machine_is_healthy_without_nvlink_or_all_reduce() -> None:
    """One H200 passed through to a VM: NVML reported no NVLinks and no fabric, and a
    one-GPU all-reduce measured 0 GB/s (busbw is algbw x 2(n-1)/n). Failing those
    against a whole board's expectations took a healthy machine out; they are skipped,
    each saying why, and the probes that apply still run."""
    report = run("[]", model="H200", suite="full", gpus=1)
    assert report.healthy, findings(report)
    skipped = {c.name: c.message for c in report.checks if c.status is CheckStatus.SKIPPED}
    assert skipped["nvlink"] == "one GPU: no NVLink peers"
    assert skipped["nccl-allreduce"] == "one GPU: an all-reduce moves nothing between GPUs"
    assert "fabric" in skipped
    passed = {c.name for c in report.checks if c.status is CheckStatus.PASS}
    assert {"gemm", "hbm", "pcie-bandwidth"} <= passed


def test_a_board_that_reports_no_nvlinks_still_fails() -> None:
    """Eight GPUs, and GPU 2 reports not one NVLink: its links did not train."""

    class LinksGone(SimBackend):
        def _gpu(self, index: int) -> GpuSample | None:
            sample = super()._gpu(index)
            return dataclasses.replace(sample, nvlinks=()) if sample and index == 2 else sample

    backend = LinksGone(node="n1", model=get_model("H200"), clock=Clock())
    checker = Checker(backend=backend, node="n1", expect=Expectations(gpus=8))
    report = checker.run()
    assert ("nvlink", 2, CheckStatus.FAIL, DEGRADED) in findings(report)


def test_driver_mismatch_is_reported_against_the_expected_version() -> None:
    report = run(
        '[{"type": "driver-mismatch", "version": "550.54.15"}]',
        expect=Expectations(gpus=8, driver_version="560.35.03"),
    )
    versions = next(c for c in report.checks if c.name == "versions")
    assert versions.status is WARN
    assert "driver 550.54.15" in versions.message


def test_fatal_xid_stays_reported_until_cleared() -> None:
    clock = Clock()
    backend = SimBackend(node="n1", model=get_model("H100"), clock=clock)
    backend.set_faults(parse_faults('[{"type": "xid", "gpu": 3, "code": 48}]'))
    checker = Checker(backend=backend, node="n1", expect=Expectations(gpus=8))
    for _ in range(3):
        clock.now += WINDOW
        assert not checker.run().healthy
    backend.set_faults([])
    checker.memory.clear_latched()
    assert checker.run().healthy


def test_repeated_application_xids_escalate_to_degraded() -> None:
    clock = Clock()
    backend = SimBackend(node="n1", model=get_model("H100"), clock=clock)
    checker = Checker(backend=backend, node="n1", expect=Expectations(gpus=8))
    for code in (13, 31, 43):
        backend.set_faults(parse_faults(f'[{{"type": "xid", "gpu": 2, "code": {code}}}]'))
        clock.now += datetime.timedelta(minutes=10)
        report = checker.run()
    assert ("xid", 2, FAIL, DEGRADED) in findings(report)


def test_application_xids_outside_the_window_do_not_count() -> None:
    clock = Clock()
    backend = SimBackend(node="n1", model=get_model("H100"), clock=clock)
    checker = Checker(
        backend=backend,
        node="n1",
        expect=Expectations(gpus=8),
        thresholds={"xid.app_repeat_window_s": 600},
    )
    for code in (13, 31, 43):
        backend.set_faults(parse_faults(f'[{{"type": "xid", "gpu": 2, "code": {code}}}]'))
        clock.now += datetime.timedelta(minutes=30)
        report = checker.run()
    assert ("xid", 2, FAIL, DEGRADED) not in findings(report)


def test_disabled_check_does_not_run() -> None:
    backend = SimBackend(node="n1", model=get_model("H100"))
    backend.set_faults(parse_faults('[{"type": "nvlink-down", "gpu": 1, "link": 3}]'))
    checker = Checker(backend=backend, node="n1", disabled=["nvlink"])
    assert checker.run().healthy

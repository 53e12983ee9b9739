"""The library's surface: ``gpuhealth.check`` on simulated GPUs, the error
root every deliberate error shares, what ``import gpuhealth`` names and loads."""

from __future__ import annotations

import importlib.metadata
import socket
import subprocess
import sys

import pytest

import gpuhealth
from gpuhealth.active.probes import ProbeFailedError, ProbeUnavailableError
from gpuhealth.backends.base import BackendUnavailableError
from gpuhealth.backends.nvml import GpuLostError
from gpuhealth.backends.sim import SimBackend
from gpuhealth.cli import VirtualClock
from gpuhealth.faults import FaultListError, parse_faults
from gpuhealth.models import UnknownGpuModelError, get_model
from gpuhealth.parsers import ParseError
from gpuhealth.runner import UnknownCheckError
from gpuhealth.samples import NodeSample
from gpuhealth.thresholds import UnknownThresholdError

PASS, FAIL = gpuhealth.CheckStatus.PASS, gpuhealth.CheckStatus.FAIL


def sim(faults: str = "[]", *, clock: VirtualClock | None = None) -> SimBackend:
    backend = SimBackend(node="n1", model=get_model("H100"), clock=clock or VirtualClock())
    backend.set_faults(parse_faults(faults))
    return backend


def test_check_of_a_healthy_sim_node_passes_every_check() -> None:
    report = gpuhealth.check(backend=sim(), node="n1")
    assert report.healthy
    assert report.checks
    assert {c.status for c in report.checks} == {PASS}
    assert (report.node, report.backend, report.suite) == ("n1", "sim", "passive")
    assert len(report.gpus) == 8


def test_check_names_the_node_by_hostname_by_default() -> None:
    assert gpuhealth.check(backend=sim()).node == socket.gethostname()


def test_check_of_a_faulty_sim_node_returns_the_failing_check() -> None:
    report = gpuhealth.check(backend=sim('[{"type": "xid", "gpu": 3, "code": 79}]'))
    assert not report.healthy
    failing = [(c.name, c.gpu, c.fault_class) for c in report.checks if c.status is FAIL]
    assert failing == [("xid", 3, gpuhealth.FaultClass.FATAL)]


def test_an_active_suite_gets_simulated_probes_on_a_sim_backend() -> None:
    report = gpuhealth.check(
        backend=sim('[{"type": "slow-gemm", "gpu": 4, "factor": 3}]'), suite="quick"
    )
    failing = [(c.name, c.gpu) for c in report.checks if c.status is FAIL]
    assert failing == [("gemm", 4)]
    assert sum(c.name == "hbm" and c.status is PASS for c in report.checks) == 8


def test_a_rate_window_takes_a_first_reading_so_storms_show() -> None:
    storm = '[{"type": "ecc-sbe-storm", "gpu": 0, "per_minute": 200}]'
    assert gpuhealth.check(backend=sim(storm)).healthy  # one reading: no rate yet
    clock = VirtualClock()
    report = gpuhealth.check(backend=sim(storm, clock=clock), rate_window=300, sleep=clock.sleep)
    failing = [(c.name, c.gpu) for c in report.checks if c.status is FAIL]
    assert failing == [("ecc", 0)]


class ClosingBackend:
    name = "closing"

    def __init__(self) -> None:
        self.closed = False

    def sample(self) -> NodeSample:
        raise AssertionError("a check that cannot start must not sample")

    def close(self) -> None:
        self.closed = True


def test_a_check_that_cannot_start_closes_the_backend_and_says_why() -> None:
    backend = ClosingBackend()
    with pytest.raises(gpuhealth.GpuhealthError, match="unknown check"):
        gpuhealth.check(backend=backend, disabled=["nvlinks"])
    assert backend.closed


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (ParseError, ValueError),
        (ProbeUnavailableError, RuntimeError),
        (ProbeFailedError, RuntimeError),
        (FaultListError, ValueError),
        (UnknownThresholdError, KeyError),
        (UnknownCheckError, ValueError),
        (BackendUnavailableError, RuntimeError),
        (GpuLostError, Exception),
        (UnknownGpuModelError, ValueError),
    ],
)
def test_every_deliberate_error_is_a_gpuhealth_error_and_keeps_its_builtin_base(
    error: type[Exception], builtin: type[Exception]
) -> None:
    assert issubclass(error, gpuhealth.GpuhealthError)
    assert issubclass(error, builtin)


def test_a_raised_error_is_caught_as_the_root() -> None:
    with pytest.raises(gpuhealth.GpuhealthError, match="unknown GPU model 'Z9'"):
        get_model("Z9")


def test_every_name_in_all_exists() -> None:
    assert gpuhealth.__all__
    missing = [name for name in gpuhealth.__all__ if not hasattr(gpuhealth, name)]
    assert missing == []


def test_version_is_the_distributions() -> None:
    assert isinstance(gpuhealth.__version__, str)
    assert gpuhealth.__version__ == importlib.metadata.version(gpuhealth.distribution.DISTRIBUTION)


def test_import_loads_neither_nvml_nor_torch() -> None:
    code = (
        "import sys, gpuhealth; "
        "print([m for m in sys.modules if m.split('.')[0] in ('pynvml', 'torch')])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"

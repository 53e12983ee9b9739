"""One health check of a node in one call: :func:`check`.

A :class:`~gpuhealth.runner.Checker` is built for an agent that keeps it for
hours: it remembers counters between runs, so it can see rates and latch
XIDs. A script, a notebook or the ``gpuhealth check`` command wants one
answer now. This module builds the Checker, picks the probes, runs it and
closes it, so the command line and library callers share one way to do it.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Collection, Mapping

from gpuhealth.active.probes import SUITES, Probes
from gpuhealth.active.sim import SimProbes
from gpuhealth.backends.base import Backend
from gpuhealth.backends.nvml import NvmlBackend
from gpuhealth.backends.sim import SimBackend
from gpuhealth.checks import Expectations
from gpuhealth.report import Report
from gpuhealth.runner import Checker


def check(
    *,
    backend: Backend | None = None,
    node: str | None = None,
    suite: str = "passive",
    probes: Probes | None = None,
    expect: Expectations | None = None,
    thresholds: Mapping[str, float] | None = None,
    disabled: Collection[str] = (),
    rate_window: float = 0.0,
    sleep: Callable[[float], object] = time.sleep,
) -> Report:
    """Check this node once and return the report.

    ``backend`` defaults to NVML on this machine and ``node`` (the name the
    report carries) to the hostname. An active ``suite`` (``quick``,
    ``full``) runs ``probes``: by default simulated ones on a
    :class:`~gpuhealth.backends.sim.SimBackend`, PyTorch ones otherwise.
    One reading sees no rates (ECC, PCIe replay, link-error storms); with
    ``rate_window`` seconds a first reading is taken that long, by ``sleep``,
    before the one reported. The backend is closed afterwards, whoever made
    it; keep a :class:`~gpuhealth.runner.Checker` to check again.

    Raises :class:`~gpuhealth.errors.GpuhealthError` when the check cannot
    start (no NVML, no PyTorch for an active suite, an unknown check or
    threshold name). A backend that fails while sampling yields a report
    whose ``backend`` check is ``error`` instead.
    """
    backend = NvmlBackend() if backend is None else backend
    try:
        checker = Checker(
            backend=backend,
            node=socket.gethostname() if node is None else node,
            expect=expect,
            thresholds=thresholds,
            disabled=disabled,
        )
    except BaseException:
        backend.close()
        raise
    try:
        if probes is None and SUITES.get(suite):
            probes = _default_probes(backend)
        if rate_window > 0:
            checker.run()
            sleep(rate_window)
        return checker.run(suite=suite, probes=probes)
    finally:
        checker.close()


def _default_probes(backend: Backend) -> Probes:
    """Simulated probes for simulated GPUs, PyTorch ones for real GPUs."""
    if isinstance(backend, SimBackend):
        return SimProbes(backend)
    from gpuhealth.active.torch_probes import TorchProbes  # noqa: PLC0415 - optional

    return TorchProbes()

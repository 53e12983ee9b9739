"""``pitcrew probe``: what a probe pod runs on a node under validation.

Runs a gpuhealth active suite on the real GPUs (NVML, PyTorch or nccl-tests)
and writes the report to ``GPUNode.status.probe`` as ``pitcrew-probe``; the
operator judges it. Exit status: 0 passed, 1 failed, 2 could not run; the
report is written in every case, so "could not run" is visible as ``error``
results rather than a silent pod failure.
"""

from __future__ import annotations

import datetime

from gpuhealth.active.torch_probes import TorchProbes
from gpuhealth.backends.base import BackendUnavailableError
from gpuhealth.backends.nvml import NvmlBackend
from gpuhealth.report import CheckResult, CheckStatus
from gpuhealth.runner import Checker
from pitcrew.api.gpunode import ChecksStatus
from pitcrew.kube import gpunodes
from pitcrew.kube.client import PROBE_MANAGER, api_client

SUITES = {"quick": "quick", "standard": "full", "burn-in": "full"}


def run(*, node: str, suite: str, kubeconfig: str | None = None) -> int:
    api = api_client(kubeconfig)
    try:
        checker = Checker(backend=NvmlBackend(kernel_log=None), node=node)
        report = checker.run(suite=SUITES.get(suite, "full"), probes=TorchProbes())
        results, when, backend = report.checks, report.time, report.backend
    except BackendUnavailableError as error:
        results = [CheckResult(name="backend", status=CheckStatus.ERROR, message=str(error))]
        when, backend = datetime.datetime.now(datetime.UTC), "nvml"
    probe = ChecksStatus(report_time=when, backend=backend, suite=suite, results=results)
    gpunodes.apply_status(
        api,
        node=node,
        status={"probe": probe.model_dump(mode="json", by_alias=True, exclude_none=True)},
        manager=PROBE_MANAGER,
    )
    if any(r.status is CheckStatus.ERROR for r in results):
        return 2
    return 1 if any(r.status is CheckStatus.FAIL for r in results) else 0

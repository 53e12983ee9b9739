"""``pitcrew probe``: what a probe pod runs on a node under validation.

Runs a gpuhealth active suite on the real GPUs (NVML, PyTorch or nccl-tests)
and writes the report to ``GPUNode.status.probe`` as ``pitcrew-probe``; the
operator judges it. ``pitcrew probe-pair`` writes nothing to the API: rank 0
leaves the measured bus bandwidth in its pod's termination message.

Exit status: 0 passed, 1 failed, 2 could not run; the report is written in
every case, so "could not run" is visible as ``error`` results rather than a
silent pod failure.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

from kubernetes import client

from gpuhealth.active.torch_probes import TorchProbes
from gpuhealth.backends.base import BackendUnavailableError
from gpuhealth.backends.nvml import NvmlBackend
from gpuhealth.report import CheckResult, CheckStatus
from gpuhealth.runner import Checker
from pitcrew.api.gpunode import ChecksStatus
from pitcrew.api.vocabulary import PROBE_MANAGER
from pitcrew.kube import gpunodes
from pitcrew.kube.client import api_client, patient

SUITES = {"quick": "quick", "standard": "full", "burn-in": "full"}


def run(*, node: str, suite: str, job: str, kubeconfig: str | None = None) -> int:
    """Run ``suite`` on this node's GPUs and write the report, named for its Job, into
    the GPUNode's status (only a report of the Job it started counts for validation)."""
    api = api_client(kubeconfig)
    try:
        checker = Checker(backend=NvmlBackend(kernel_log=None), node=node)
        report = checker.run(suite=SUITES.get(suite, "full"), probes=TorchProbes())
        results, when, backend = report.checks, report.time, report.backend
    except BackendUnavailableError as error:
        results = [CheckResult(name="backend", status=CheckStatus.ERROR, message=str(error))]
        when, backend = datetime.datetime.now(datetime.UTC), "nvml"
    probe = ChecksStatus(report_time=when, backend=backend, suite=suite, results=results, job=job)
    write_report(api, node=node, probe=probe)
    if any(r.status is CheckStatus.ERROR for r in results):
        return 2
    return 1 if any(r.status is CheckStatus.FAIL for r in results) else 0


REPORT_PATIENCE_S = 600.0
"""How long a report write is retried through 429s, 5xx and a restarting apiserver:
longer than any probe Job may run (its deadline is the validation timeout), so the
pod's deadline, not the retry, ends a write that cannot land."""


def write_report(api: client.ApiClient, *, node: str, probe: ChecksStatus) -> None:
    """Write ``probe`` as the node's probe report. Minutes of burn-in that no round
    will redo: a throttled apiserver delays the write, it does not lose it."""
    patient(REPORT_PATIENCE_S)(gpunodes.apply_status)(
        api,
        node=node,
        status={"probe": probe.model_dump(mode="json", by_alias=True, exclude_none=True)},
        manager=PROBE_MANAGER,
    )


RESULT_PATH = Path(os.environ.get("PITCREW_RESULT_PATH", "/dev/termination-log"))
"""Where rank 0 leaves its report: the pod's termination message, read by the operator."""


def pair_report(*, busbw_gbps: float | None, error: str = "") -> str:
    """The report rank 0 leaves (a number, or why there is none); the operator judges it."""
    if busbw_gbps is None:
        return json.dumps({"error": error[:1024] or "no measurement"})
    return json.dumps({"busbwGbps": round(busbw_gbps, 3)})


def run_pair(*, run: str, pair: str, rank: int) -> int:
    """One node's side of a multi-node all-reduce: one process per local GPU, global
    ranks ``rank * gpus + local``. Rank 0 of node 0 leaves the measured bus bandwidth in
    its termination message; the probe writes nothing to the API (its account may not,
    and a node under test must not write the verdict on itself)."""
    from gpuhealth.active.probes import ProbeUnavailableError  # noqa: PLC0415
    from gpuhealth.active.torch_probes import multinode_allreduce_busbw  # noqa: PLC0415

    busbw: float | None = None
    error = ""
    try:
        busbw = multinode_allreduce_busbw()
    except ProbeUnavailableError as problem:
        error = str(problem)
    if rank == 0:
        RESULT_PATH.write_text(pair_report(busbw_gbps=busbw, error=error))
    return 0 if busbw is not None else 2

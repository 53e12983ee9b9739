"""``pitcrew probe``: what a probe pod runs on a node under validation.

Runs a gpuhealth active suite on the real GPUs (NVML, PyTorch or nccl-tests)
and writes the report to ``GPUNode.status.probe`` as ``pitcrew-probe``; the
operator judges it. Exit status: 0 passed, 1 failed, 2 could not run; the
report is written in every case, so "could not run" is visible as ``error``
results rather than a silent pod failure.
"""

from __future__ import annotations

import datetime
import os
import zlib
from typing import Any

from kubernetes import client

from gpuhealth.active.torch_probes import TorchProbes
from gpuhealth.backends.base import BackendUnavailableError
from gpuhealth.backends.nvml import NvmlBackend
from gpuhealth.models import get_model
from gpuhealth.report import CheckResult, CheckStatus
from gpuhealth.runner import Checker
from pitcrew.api.gpunode import ChecksStatus
from pitcrew.api.meta import API_VERSION, GROUP, VERSION
from pitcrew.api.validationrun import ValidationRun
from pitcrew.api.vocabulary import PROBE_MANAGER
from pitcrew.kube import gpunodes
from pitcrew.kube.client import api_client, retrying

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
    gpunodes.apply_status(
        api,
        node=node,
        status={"probe": probe.model_dump(mode="json", by_alias=True, exclude_none=True)},
        manager=PROBE_MANAGER,
    )
    if any(r.status is CheckStatus.ERROR for r in results):
        return 2
    return 1 if any(r.status is CheckStatus.FAIL for r in results) else 0


PAIR_NICS = 1
"""One rank per node, on GPU 0 and its NIC: the floor is the per-NIC floor."""


def pair_result(
    *, name: str, busbw_gbps: float | None, floor_gbps: float, error: str = ""
) -> dict[str, Any]:
    """The pair probe's entry in ``ValidationRun.status.pairs`` (its own fields)."""
    nodes = name.split("--")
    if busbw_gbps is None:
        return {"name": name, "nodes": nodes, "result": "error", "message": error[:1024]}
    ok = busbw_gbps >= floor_gbps
    return {
        "name": name,
        "nodes": nodes,
        "result": "pass" if ok else "fail",
        "busbwGbps": round(busbw_gbps, 1),
        "message": f"{busbw_gbps:.1f} GB/s {'>=' if ok else '<'} floor {floor_gbps:g} GB/s",
    }


def write_pair_result(api: client.ApiClient, *, run: str, entry: dict[str, Any]) -> None:
    """Apply one pair's entry. Each pair applies under its own field manager: with one
    shared manager, applying pair B's entry would withdraw pair A's."""
    manager = f"{PROBE_MANAGER}-{zlib.crc32(entry['name'].encode()):08x}"
    body = {
        "apiVersion": API_VERSION,
        "kind": ValidationRun.KIND,
        "metadata": {"name": run},
        "status": {"pairs": [entry]},
    }
    retrying(client.CustomObjectsApi(api).patch_cluster_custom_object_status)(
        GROUP,
        VERSION,
        ValidationRun.PLURAL,
        run,
        body,
        field_manager=manager,
        force=True,
        _content_type=gpunodes.APPLY,
    )


def run_pair(*, run: str, pair: str, rank: int, kubeconfig: str | None = None) -> int:
    """One node's side of a multi-node all-reduce: one process per local GPU, global
    ranks ``rank * gpus + local``; rank 0 of node 0 writes the result."""
    from gpuhealth.active.probes import ProbeUnavailableError  # noqa: PLC0415
    from gpuhealth.active.torch_probes import multinode_allreduce_busbw  # noqa: PLC0415

    api = api_client(kubeconfig)
    busbw: float | None = None
    error = ""
    try:
        busbw = multinode_allreduce_busbw()
    except ProbeUnavailableError as problem:
        error = str(problem)
    if rank == 0:
        model = get_model(os.environ.get("GPU_MODEL", "H100"))
        write_pair_result(
            api,
            run=run,
            entry=pair_result(
                name=pair,
                busbw_gbps=busbw,
                floor_gbps=model.nccl_inter_floor_gbps_per_nic * PAIR_NICS,
                error=error,
            ),
        )
    return 0 if busbw is not None else 2

"""An nccl-tests run judged against the floor of its own topology.

The floor depends on what the run crossed, which its rank lines say:

- one host: the GPU model's in-node floor (``nccl_intra_floor_gbps``, an
  all-reduce over all of a node's GPUs);
- several hosts: the inter-node floor per NIC (``nccl_inter_floor_gbps_per_nic``)
  times the NICs per node. nccl-tests does not print NICs; the default is
  one per GPU the run used on each host (the least of them), the rail-
  optimised design of the HGX boards these floors were set on, where each
  GPU reaches the fabric through its own NIC. A node built otherwise passes
  ``nics`` (``--nics`` on the command line); the active multi-node probe
  (``gpuhealth allreduce``) takes the same count. Judging a 2 x 8 GPU run
  against one NIC's floor would pass a fabric at a quarter of its speed.

``floor`` (``--floor``) overrides all of it. Wrong data fails whatever the
bandwidth. No verdict against a floor is ever a pass by default: output
that names no hosts, a GPU model Pitcrew has no floors for, mixed models, a
test other than ``all_reduce_perf``, or a largest message smaller than the
floor was set for is a verdict of ``error``, saying which, so the caller can
pass a floor or run again. The in-node floors are set with 16 GiB messages,
and an NVSwitch all-reduce still gains bandwidth up to there, so an in-node
run must reach 16 GiB; an inter-node run is bound by its NICs from about
1 GiB on.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuhealth.models import MODELS, GpuModel, model_for_nvml_name
from gpuhealth.parsers.nccl_tests import NcclResult
from gpuhealth.report import CheckStatus

ALL_REDUCE = "all_reduce_perf"
IN_NODE_BYTES = 16 << 30
"""The message size of the in-node floors."""
INTER_NODE_BYTES = 1 << 30
"""From here on an inter-node all-reduce runs at the speed of its NICs."""


@dataclass(frozen=True)
class Verdict:
    status: CheckStatus
    """``pass``, ``fail``, or ``error`` when there is no floor to judge against."""
    observed_gbps: float
    """busbw at the largest size, best of out-of-place and in-place."""
    floor_gbps: float | None
    basis: str
    """Where the floor came from, for a person."""
    message: str


def _gib(size: int) -> str:
    return f"{size / (1 << 30):g} GiB" if size >= 1 << 30 else f"{size} B"


def _no_floor(observed: float, why: str) -> Verdict:
    return Verdict(
        CheckStatus.ERROR, observed, None, "", f"no floor to judge by: {why}; pass --floor"
    )


def _model(result: NcclResult) -> GpuModel | str:
    """The run's GPU model, or why there is none."""
    names = result.gpu_models
    if not names:
        return "the output has no rank lines naming the GPUs"
    if len(names) > 1:
        return f"the run mixes GPU models ({', '.join(names)})"
    model = model_for_nvml_name(names[0])
    if model is None:
        known = ", ".join(sorted(n for m in MODELS.values() for n in m.nvml_names))
        return f"Pitcrew has no floors for GPU model {names[0]!r} (known: {known})"
    return model


def _topology_floor(result: NcclResult, nics: int | None) -> tuple[float, str] | str:
    if not result.hosts:
        return "the output names no hosts, so in-node and inter-node cannot be told apart"
    if result.collective not in (None, ALL_REDUCE):
        return f"the floors are for {ALL_REDUCE}, this run is {result.collective}"
    model = _model(result)
    if isinstance(model, str):
        return model
    needed = IN_NODE_BYTES if len(result.hosts) == 1 else INTER_NODE_BYTES
    if result.largest.size_bytes < needed:
        return (
            f"its largest message, {_gib(result.largest.size_bytes)}, is smaller than the "
            f"{_gib(needed)} the floor is set for (run with -e {needed >> 30}G)"
        )
    if len(result.hosts) == 1:
        return model.nccl_intra_floor_gbps, f"in-node floor of {model.name}"
    per_host = min(count for _, count in result.host_ranks)
    count = nics if nics is not None else per_host
    per_nic = model.nccl_inter_floor_gbps_per_nic
    basis = (
        f"inter-node floor of {model.name} over {len(result.hosts)} hosts, "
        f"{per_nic:g} GB/s per NIC x {count} NIC(s)"
    )
    if nics is None:
        basis += ", one per GPU: --nics to change"
    return per_nic * count, basis


def judge(result: NcclResult, *, floor: float | None = None, nics: int | None = None) -> Verdict:
    """The run's verdict: wrong data fails; else busbw against ``floor`` or the
    floor of the run's topology (see the module docstring)."""
    observed = result.peak_busbw_gbps
    size = _gib(result.largest.size_bytes)
    if result.failed:
        why = f"{result.out_of_bounds} out-of-bounds value(s), {result.wrong_total} wrong"
        return Verdict(CheckStatus.FAIL, observed, floor, "", f"wrong data: {why}")
    if floor is not None:
        found: tuple[float, str] | str = (floor, "--floor")
    else:
        found = _topology_floor(result, nics)
    if isinstance(found, str):
        return _no_floor(observed, found)
    limit, basis = found
    status = CheckStatus.PASS if observed >= limit else CheckStatus.FAIL
    relation = "meets" if status is CheckStatus.PASS else "is under"
    message = f"busbw {observed:g} GB/s at {size} {relation} {limit:g} GB/s ({basis})"
    return Verdict(status, observed, limit, basis, message)

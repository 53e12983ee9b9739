"""The ``gpuhealth`` command line.

``gpuhealth check`` exits 1 when any check or probe failed; otherwise 2 when
any could not run (status ``error``: no NVML, bad scenario file, a backend
error, a probe that crashed or has no floor for an unknown GPU model), with
one line on stderr naming them, because a node whose probes did not run has
not been validated; otherwise 0. ``gpuhealth allreduce`` exits the same way
for its one measurement. ``gpuhealth parse`` exits 0 on a clean parse, 1 when
the parsed results contain failures (a failed DCGM test, a fatal or degraded
XID or SXid, wrong data or a busbw under the run's floor), 2 on unreadable
input or, for ``nccl-tests``, when there is no floor to judge the run by (an
unknown GPU model, say: ``--floor`` gives one), and, for ``kmsg``, 3 when the
log was read only in part: some driver lines could not be parsed, they are
listed as ``UNREAD`` (``flagged`` in ``--json``) with their line numbers next
to every event of the other lines (1 wins over 3, as it wins over 2). The
floor of an nccl-tests run follows its topology
(:mod:`gpuhealth.parsers.nccl_verdict`; ``--nics`` for a multi-node run).
Errors are one line on stderr, never a traceback.

Rates need two readings. ``--rate-window`` takes the second reading that many
seconds after the first; on the simulated backend time is virtual, so the
window costs nothing and storms show up in a single command.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import enum
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic.alias_generators import to_camel

from gpuhealth import slurm, sweep, sxid, xid
from gpuhealth.active.probes import SUITES, run_measurement
from gpuhealth.arguments import Parser
from gpuhealth.backends.base import Backend
from gpuhealth.backends.nvml import NvmlBackend, nvml_device_name
from gpuhealth.backends.sim import SimBackend
from gpuhealth.checks import Expectations
from gpuhealth.distribution import version
from gpuhealth.errors import GpuhealthError
from gpuhealth.faults import parse_faults
from gpuhealth.models import (
    GpuModel,
    get_model,
    require_model_for_nvml_name,
)
from gpuhealth.parsers import dcgm_diag, kmsg, nccl_tests, nccl_verdict
from gpuhealth.report import CheckResult, CheckStatus, FaultClass, RecommendedAction, Report

EXIT_HEALTHY, EXIT_UNHEALTHY, EXIT_CANNOT_RUN, EXIT_PARTIAL = 0, 1, 2, 3


class VirtualClock:
    """Time for the simulated backend: starts now, moves only when told."""

    def __init__(self) -> None:
        self.now = datetime.datetime.now(datetime.UTC)

    def __call__(self) -> datetime.datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)


def _backend(args: argparse.Namespace) -> tuple[Backend, VirtualClock | None]:
    if args.backend == "sim":
        clock = VirtualClock()
        sim = SimBackend(
            node=args.node,
            model=get_model(args.gpu_model),
            gpus=args.gpus,
            clock=clock,
            noise=args.noise,
            sleep=clock.sleep,
        )
        if args.scenario:
            sim.set_faults(parse_faults(Path(args.scenario).read_text()))
        return sim, clock
    return NvmlBackend(kernel_log=Path(args.kernel_log) if args.kernel_log else None), None


def print_report(report: Report, *, verbose: bool = False) -> None:
    """One line per finding; passing checks only with ``verbose``."""
    shown = [c for c in report.checks if verbose or c.status is not CheckStatus.PASS]
    width = max((len(c.name) for c in shown), default=10)
    for check in shown:
        gpu = f"gpu{check.gpu}" if check.gpu is not None else "node"
        value = (
            "" if check.observed is None else f" {check.observed:g}{check.unit and ' '}{check.unit}"
        )
        klass = (
            "" if check.fault_class.value == "none" else f" [{check.fault_class}/{check.action}]"
        )
        print(
            f"{check.status.value.upper():7} {check.name:{width}} {gpu:6}{value}{klass} "
            f"{check.message}".rstrip()
        )
    counts = {s: sum(1 for c in report.checks if c.status is s) for s in CheckStatus}
    summary = ", ".join(f"{n} {s.value}" for s, n in counts.items() if n)
    verdict = "HEALTHY" if report.healthy else "UNHEALTHY"
    print(f"{report.node}: {verdict} ({summary}; {report.backend} backend, {report.suite} suite)")


def _sweep(args: argparse.Namespace) -> Report:
    backend, clock = _backend(args)
    return sweep.check(
        backend=backend,
        node=args.node,
        suite=args.suite,
        expect=Expectations(
            gpus=args.expected_gpus or args.gpus if args.backend == "sim" else args.expected_gpus
        ),
        disabled=args.disable or (),
        rate_window=args.rate_window,
        sleep=clock.sleep if clock else time.sleep,
    )


def _check(args: argparse.Namespace) -> int:
    report = _sweep(args)
    if args.json:
        print(report.model_dump_json(by_alias=True, indent=2))
    else:
        print_report(report, verbose=args.verbose)
    return _exit_code(report.checks)


def _slurm(args: argparse.Namespace) -> int:
    return slurm.act(
        _sweep(args), node=slurm.node_name(args.node_name), mode=args.mode, scontrol=args.scontrol
    )


def _exit_code(checks: Sequence[CheckResult]) -> int:
    """1 on any failure; else 2, saying on stderr what could not run, on any
    error; else 0. An error is never a pass: the check did not happen."""
    if any(c.status is CheckStatus.FAIL for c in checks):
        return EXIT_UNHEALTHY
    errors: dict[str, list[CheckResult]] = {}
    for check in checks:
        if check.status is CheckStatus.ERROR:
            errors.setdefault(check.name, []).append(check)
    if not errors:
        return EXIT_HEALTHY
    parts = []
    for name, found in errors.items():
        gpus = [c.gpu for c in found if c.gpu is not None]
        where = f" (gpu {','.join(str(g) for g in gpus)})" if gpus else ""
        parts.append(f"{name}{where}: {found[0].message or 'error'}")
    print(f"gpuhealth: could not run {len(errors)} check(s): {'; '.join(parts)}", file=sys.stderr)
    return EXIT_CANNOT_RUN


@dataclass(frozen=True)
class _Parsed:
    """What ``gpuhealth parse`` prints and how it exits."""

    payload: dict[str, Any]
    lines: list[str]
    code: int


URGENT = (FaultClass.FATAL, FaultClass.DEGRADED)


def _camel(item: Any) -> dict[str, Any]:
    """A parser's dataclass as JSON: camelCase keys, enum values, lists for tuples."""

    def value(field: Any) -> Any:
        if isinstance(field, enum.Enum):
            return field.value
        if isinstance(field, tuple):
            return [value(v) for v in field]
        if isinstance(field, datetime.datetime):
            return field.isoformat()
        return field

    return {to_camel(f.name): value(getattr(item, f.name)) for f in dataclasses.fields(item)}


def _ruled(event: Any, rule: xid.XidRule | sxid.SxidRule) -> dict[str, Any]:
    """An XID or SXid event with what its table makes of it."""
    said = {"faultClass": rule.fault_class.value, "action": rule.action.value}
    return _camel(event) | said | {"description": rule.description}


def _parse_nccl(text: str, source: str, args: argparse.Namespace) -> _Parsed:
    result = (
        nccl_tests.parse_json(text, source=source)
        if text.lstrip().startswith("{")
        else nccl_tests.parse_text(text, source=source)
    )
    verdict = nccl_verdict.judge(result, floor=args.floor, nics=args.nics)
    largest = result.largest
    outer = largest.out_of_place
    payload = {
        "collective": result.collective,
        "ncclTestsVersion": result.version,
        "ranks": result.world_size,
        "hosts": [{"host": host, "ranks": ranks} for host, ranks in result.host_ranks],
        "gpuModels": list(result.gpu_models),
        "rows": len(result.rows),
        "largestBytes": largest.size_bytes,
        "outOfPlaceBusbwGBps": outer.busbw_gbps if outer else None,
        "inPlaceBusbwGBps": largest.in_place.busbw_gbps,
        "peakBusbwGBps": result.peak_busbw_gbps,
        "avgBusbwGBps": result.avg_busbw_gbps,
        "wrong": {"outOfPlace": outer.wrong if outer else None, "inPlace": largest.in_place.wrong},
        "wrongTotal": result.wrong_total,
        "validated": result.validated,
        "outOfBounds": result.out_of_bounds,
        "failed": result.failed,
        "errors": list(result.errors),
        "verdict": {
            "status": verdict.status.value,
            "observedGBps": verdict.observed_gbps,
            "floorGBps": verdict.floor_gbps,
            "basis": verdict.basis,
            "message": verdict.message,
        },
    }
    hosts = ", ".join(f"{host} ({ranks})" for host, ranks in result.host_ranks) or "not printed"
    busbw = f"in-place {largest.in_place.busbw_gbps:g} GB/s #wrong {largest.in_place.wrong}"
    if outer:
        busbw = f"out-of-place {outer.busbw_gbps:g} GB/s #wrong {outer.wrong}, {busbw}"
    lines = [
        f"collective: {result.collective or 'not printed'}"
        + (f" (nccl-tests {result.version})" if result.version else ""),
        f"ranks: {result.world_size or 'not printed'}; hosts: {hosts}",
        f"gpu: {', '.join(result.gpu_models) or 'not printed'}",
        f"largest: {largest.size_bytes} B: busbw {busbw}",
        f"out of bounds: {result.out_of_bounds}; avg busbw: {result.avg_busbw_gbps}",
        f"verdict: {verdict.status.value.upper()} {verdict.message}",
    ]
    if verdict.status is CheckStatus.ERROR:
        print(f"gpuhealth: {source}: {verdict.message}", file=sys.stderr)
    code = {CheckStatus.PASS: EXIT_HEALTHY, CheckStatus.FAIL: EXIT_UNHEALTHY}
    return _Parsed(payload, lines, code.get(verdict.status, EXIT_CANNOT_RUN))


def _parse_dcgm(text: str, source: str, args: argparse.Namespace) -> _Parsed:
    report = dcgm_diag.parse_report(text, source=source)
    payload = {
        "dcgmVersion": report.dcgm_version,
        "driverVersion": report.driver_version,
        "results": [_camel(r) for r in report.results],
    }
    lines = [
        f"{r.status.value.upper():7} {r.test:18} {r.entity or 'node':6} "
        f"{r.fault_class}/{r.action}{f' [error {r.error_id}]' if r.error_id is not None else ''} "
        f"{r.message}".rstrip()
        for r in report.results
    ]
    failed = any(r.status is CheckStatus.FAIL for r in report.results)
    return _Parsed(payload, lines, EXIT_UNHEALTHY if failed else EXIT_HEALTHY)


def _parse_kmsg(text: str, source: str, args: argparse.Namespace) -> _Parsed:
    found = kmsg.parse_text(text, source=source)
    xids = [_ruled(e, e.rule) for e in found.xids]
    sxids = [_ruled(e, e.rule) | {"fatal": e.rule.fatal} for e in found.sxids]
    flagged = [_camel(f) for f in found.flagged]
    payload = {"xids": xids, "sxids": sxids, "flagged": flagged, "partial": found.partial}
    lines = [
        f"XID  {x['code']:5} {x['pciBusId']:14} {x['faultClass']}/{x['action']} "
        f"{x['description']}: {x['message']}"
        for x in xids
    ]
    lines += [
        f"SXID {x['code']:5} {x['switch'] or '-'} {x['pciBusId']} "
        f"{x['faultClass']}/{x['action']} {x['description']}: {x['message']}"
        for x in sxids
    ]
    lines += [f"UNREAD line {f.line}: {f.reason}: {f.text}" for f in found.flagged]
    if any(x["faultClass"] in URGENT for x in [*xids, *sxids]):
        code = EXIT_UNHEALTHY
    elif found.partial:
        first = found.flagged[0]
        print(
            f"gpuhealth: {len(found.flagged)} driver line(s) could not be read (first: "
            f"{source}:{first.line}); the events of every other line are listed",
            file=sys.stderr,
        )
        code = EXIT_PARTIAL
    else:
        code = EXIT_HEALTHY
    return _Parsed(payload, lines, code)


PARSERS = {"nccl-tests": _parse_nccl, "dcgm-diag": _parse_dcgm, "kmsg": _parse_kmsg}


def _parse(args: argparse.Namespace) -> int:
    text = Path(args.file).read_text(errors="replace")
    parsed = PARSERS[args.kind](text, str(args.file), args)
    if args.json:
        print(json.dumps(parsed.payload, indent=2))
    else:
        print("\n".join(parsed.lines))
    return parsed.code


def _allreduce(args: argparse.Namespace) -> int:
    """Multi-node all-reduce for one rank; judged against the inter-node floor."""
    from gpuhealth.active.torch_probes import multinode_allreduce_busbw  # noqa: PLC0415

    floor = args.floor or _local_model(args).nccl_inter_floor_gbps_per_nic * args.nics
    result = run_measurement(
        "nccl-multinode",
        multinode_allreduce_busbw,
        floor=floor,
        unit="GB/s",
        gpu=None,
        action=RecommendedAction.NONE,
    )
    print(
        result.model_dump_json(by_alias=True)
        if args.json
        else f"{result.status.value.upper()} {result.name} {result.message or result.observed}"
    )
    return _exit_code([result])


def _local_model(args: argparse.Namespace) -> GpuModel:
    """``--gpu-model`` if given, else the model NVML names for this rank's GPU:
    an H100's floor is no floor for another SKU, so there is no default."""
    if args.gpu_model:
        return get_model(args.gpu_model)
    index = int(os.environ.get("LOCAL_RANK", "0"))
    try:
        name = nvml_device_name(index)
    except GpuhealthError as error:
        raise GpuhealthError(
            f"cannot tell this GPU's model ({error}); pass --gpu-model or --floor"
        ) from None
    return require_model_for_nvml_name(name)


def _check_arguments(check: argparse.ArgumentParser) -> None:
    """What to check and on which backend: ``check`` and ``slurm`` alike."""
    check.add_argument("--suite", choices=list(SUITES), default="passive")
    check.add_argument("--backend", choices=["nvml", "sim"], default="nvml")
    check.add_argument("--scenario", help="JSON fault list for the sim backend (docs/faults.md)")
    check.add_argument(
        "--noise",
        type=float,
        default=1.0,
        help="sim backend: 1 healthy noise (moving readings, rare NVML errors), 0 exact values",
    )
    check.add_argument("--gpu-model", default="H100", help="sim backend GPU model")
    check.add_argument("--gpus", type=int, default=8, help="sim backend GPU count")
    check.add_argument("--expected-gpus", type=int, default=None)
    check.add_argument("--node", default="localhost")
    check.add_argument("--disable", action="append", help="skip a check (repeatable)")
    check.add_argument(
        "--kernel-log",
        default="/dev/kmsg",
        help="kernel log for XIDs (nvml backend); empty to skip",
    )
    check.add_argument(
        "--rate-window",
        type=float,
        default=None,
        help="seconds between the two readings for rates (default: 60 on sim, 0 on nvml)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="gpuhealth", description="Node-local GPU health checks.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="run a suite of checks on this node")
    _check_arguments(check)
    check.add_argument("--json", action="store_true")
    check.add_argument("-v", "--verbose", action="store_true", help="also list passing checks")
    check.set_defaults(handler=_check)
    slurm_cmd = commands.add_parser(
        "slurm",
        help="the checks as Slurm's HealthCheckProgram or prolog: drain the Slurm node "
        "with the finding as its reason, resume only gpuhealth's own drain",
    )
    slurm_cmd.add_argument("mode", choices=["healthcheck", "prolog"])
    _check_arguments(slurm_cmd)
    slurm_cmd.add_argument(
        "--node-name", default=None, help="Slurm node (default: $SLURMD_NODENAME, the hostname)"
    )
    slurm_cmd.add_argument("--scontrol", default="scontrol", help="path of Slurm's scontrol")
    slurm_cmd.set_defaults(handler=_slurm)
    allreduce = commands.add_parser(
        "allreduce",
        help="multi-node NCCL all-reduce for this rank (env: MASTER_ADDR, "
        "MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK)",
    )
    allreduce.add_argument(
        "--gpu-model", default=None, help="GPU model (default: the one NVML names for LOCAL_RANK)"
    )
    allreduce.add_argument("--nics", type=int, default=1, help="400G NICs per node in use")
    allreduce.add_argument("--floor", type=float, default=None, help="busbw floor, GB/s")
    allreduce.add_argument("--json", action="store_true")
    allreduce.set_defaults(handler=_allreduce)
    parse = commands.add_parser("parse", help="parse and classify a tool's output")
    parse.add_argument("kind", choices=list(PARSERS))
    parse.add_argument("file")
    parse.add_argument(
        "--floor",
        type=float,
        default=None,
        help="nccl-tests: busbw floor, GB/s (default: the floor of the run's topology and GPU)",
    )
    parse.add_argument(
        "--nics",
        type=int,
        default=None,
        help="nccl-tests: 400G NICs per node of a multi-node run (default: one per GPU)",
    )
    parse.add_argument("--json", action="store_true")
    parse.set_defaults(handler=_parse)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "rate_window", 0) is None:
        args.rate_window = 60.0 if args.backend == "sim" else 0.0
    try:
        return int(args.handler(args))
    except (GpuhealthError, OSError) as error:
        print(f"gpuhealth: {error}", file=sys.stderr)
        return EXIT_CANNOT_RUN


if __name__ == "__main__":
    sys.exit(main())

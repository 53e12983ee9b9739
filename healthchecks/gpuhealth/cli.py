"""The ``gpuhealth`` command line.

``gpuhealth check`` exits 1 when any check or probe failed; otherwise 2 when
any could not run (status ``error``: no NVML, bad scenario file, a backend
error, a probe that crashed or has no floor for an unknown GPU model), with
one line on stderr naming them, because a node whose probes did not run has
not been validated; otherwise 0. ``gpuhealth allreduce`` exits the same way
for its one measurement. ``gpuhealth parse`` exits 0 on a clean parse, 1 when
the parsed results contain failures, 2 on unreadable input. Errors are one
line on stderr, never a traceback.

Rates need two readings. ``--rate-window`` takes the second reading that many
seconds after the first; on the simulated backend time is virtual, so the
window costs nothing and storms show up in a single command.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpuhealth import sweep, xid
from gpuhealth.active.probes import SUITES, run_measurement
from gpuhealth.backends.base import Backend
from gpuhealth.backends.nvml import NvmlBackend, nvml_device_name
from gpuhealth.backends.sim import SimBackend
from gpuhealth.checks import Expectations
from gpuhealth.errors import GpuhealthError
from gpuhealth.faults import parse_faults
from gpuhealth.models import (
    GpuModel,
    get_model,
    require_model_for_nvml_name,
)
from gpuhealth.parsers import dcgm_diag, kmsg, nccl_tests
from gpuhealth.report import CheckResult, CheckStatus, RecommendedAction, Report

EXIT_HEALTHY, EXIT_UNHEALTHY, EXIT_CANNOT_RUN = 0, 1, 2


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
            node=args.node, model=get_model(args.gpu_model), gpus=args.gpus, clock=clock
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


def _check(args: argparse.Namespace) -> int:
    backend, clock = _backend(args)
    report = sweep.check(
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
    if args.json:
        print(report.model_dump_json(by_alias=True, indent=2))
    else:
        print_report(report, verbose=args.verbose)
    return _exit_code(report.checks)


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


def _parse(args: argparse.Namespace) -> int:
    text = Path(args.file).read_text(errors="replace")
    source = str(args.file)
    payload: dict[str, Any]
    if args.kind == "nccl-tests":
        stripped = text.lstrip()
        result = (
            nccl_tests.parse_json(text, source=source)
            if stripped.startswith("{")
            else nccl_tests.parse_text(text, source=source)
        )
        payload = {
            "rows": len(result.rows),
            "largestBytes": result.largest.size_bytes,
            "peakBusbwGBps": result.peak_busbw_gbps,
            "avgBusbwGBps": result.avg_busbw_gbps,
            "outOfBounds": result.out_of_bounds,
            "failed": result.failed,
            "errors": list(result.errors),
        }
        failed = result.failed
    elif args.kind == "dcgm-diag":
        results = dcgm_diag.parse(text, source=source)
        payload = {
            "results": [
                {
                    "category": r.category,
                    "test": r.test,
                    "gpu": r.gpu,
                    "status": r.status.value,
                    "faultClass": r.fault_class.value,
                    "action": r.action.value,
                    "message": r.message,
                    "errorId": r.error_id,
                }
                for r in results
            ]
        }
        failed = any(r.status is CheckStatus.FAIL for r in results)
    else:
        events = kmsg.parse_text(text, source=source)
        payload = {
            "xids": [
                {
                    "code": e.code,
                    "pciBusId": e.pci_bus_id,
                    "faultClass": xid.classify(e.code, e.message).fault_class.value,
                    "action": xid.classify(e.code, e.message).action.value,
                    "description": xid.classify(e.code, e.message).description,
                    "message": e.message,
                }
                for e in events
            ]
        }
        failed = any(x["faultClass"] in ("fatal", "degraded") for x in payload["xids"])
    if args.json:
        print(json.dumps(payload, indent=2))
    else:
        for key, value in payload.items():
            if isinstance(value, list):
                for item in value:
                    print(item)
            else:
                print(f"{key}: {value}")
    return EXIT_UNHEALTHY if failed else EXIT_HEALTHY


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuhealth", description="Node-local GPU health checks.")
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="run a suite of checks on this node")
    check.add_argument("--suite", choices=list(SUITES), default="passive")
    check.add_argument("--backend", choices=["nvml", "sim"], default="nvml")
    check.add_argument("--scenario", help="JSON fault list for the sim backend (docs/faults.md)")
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
    check.add_argument("--json", action="store_true")
    check.add_argument("-v", "--verbose", action="store_true", help="also list passing checks")
    check.set_defaults(handler=_check)
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
    parse.add_argument("kind", choices=["nccl-tests", "dcgm-diag", "kmsg"])
    parse.add_argument("file")
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

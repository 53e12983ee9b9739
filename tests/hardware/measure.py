"""The hardware check's measurements: gpuhealth on real GPUs, against the model's spec.

``tests/hardware/run.sh`` drives this module on a machine with NVIDIA GPUs,
one stage per command, each writing one file under ``--out``:

- ``sweep``: the NVML backend's sample, ``--sweeps`` times; per-sweep wall
  time, and what NVML did not report or failed to read ("surprises": a field
  the driver does not support here, a link count the model table does not
  expect) -> ``sweep.json``;
- ``check``: ``gpuhealth check --suite full --json`` as its own process, timed
  -> ``report.json`` (the report) and ``check.json`` (exit code, seconds,
  stderr);
- ``probes``: the active probes called one by one, each per GPU and timed,
  unrounded -> ``probes.json``;
- ``reset`` (only with ``run.sh --reset``: it resets GPU 0): ``nvidia-smi
  --gpu-reset -i 0`` while the agent's NVML backend holds the GPUs, then after
  the backend released them as the agent does for a reset rung, then the backend
  opened again and sampled -> ``reset.json``;
- ``summarize``: the table of figures (measured, the model's data-sheet spec,
  its floor, the ratios) -> ``table.txt``, and every figure on one JSON line
  -> ``figures.jsonl``.

The stages take the backend and the probes as arguments, and ``--sim MODEL``
runs them on gpuhealth's simulated GPUs, so everything but the NVML and
PyTorch calls themselves is unit-tested on machines without a GPU. The
figures never judge: the floors in ``gpuhealth.models`` do that in the
report; the table shows how far above its floor and below its spec each
measurement sits, which is what a floor's author needs to know.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pydantic

from gpuhealth.active.probes import PER_GPU, Probes
from gpuhealth.active.sim import SimProbes
from gpuhealth.backends.base import Backend
from gpuhealth.backends.nvml import NvmlBackend
from gpuhealth.backends.sim import SimBackend
from gpuhealth.errors import GpuhealthError
from gpuhealth.kernel_log import KMSG
from gpuhealth.models import GpuModel, get_model, model_for_nvml_name
from gpuhealth.report import CheckStatus, Report
from gpuhealth.samples import GpuSample, NodeSample

EXIT_OK, EXIT_INCOMPLETE, EXIT_CANNOT_RUN = 0, 1, 2
SCHEMA = "pitcrew.dev/hardware-check/v1"
ALLREDUCE = "nccl-allreduce"

PCIE_X16_GBPS = {3: 16.0, 4: 32.0, 5: 64.0}
"""Host-to-device rate of an x16 link per direction, GB/s, by PCIe generation
(the rates ``gpuhealth.models`` derives its PCIe floors from)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProbeFigure:
    """How one probe's figure is named and what it is held against."""

    name: str
    """The probe's check name in the report (``gemm``)."""
    label: str
    unit: str
    spec: Callable[[GpuModel], float | None]
    """The data sheet's figure for the model, where there is one."""
    floor: Callable[[GpuModel], float]
    """The least a healthy GPU of the model reaches, as gpuhealth judges it."""


PROBE_FIGURES = (
    ProbeFigure(
        name="gemm",
        label="bf16 GEMM 8192^3",
        unit="TF/s",
        spec=lambda m: m.peak_bf16_tflops,
        floor=lambda m: m.gemm_floor_tflops,
    ),
    ProbeFigure(
        name="hbm",
        label="HBM copy, read+write",
        unit="GB/s",
        spec=lambda m: m.hbm_peak_gbps,
        floor=lambda m: m.hbm_floor_gbps,
    ),
    ProbeFigure(
        name="pcie-bandwidth",
        label="host-to-device, pinned",
        unit="GB/s",
        spec=lambda m: PCIE_X16_GBPS.get(m.pcie_gen, 0.0) * m.pcie_width / 16 or None,
        floor=lambda m: m.pcie_floor_gbps,
    ),
    ProbeFigure(
        name=ALLREDUCE,
        label="all-reduce busbw, all GPUs",
        unit="GB/s",
        spec=lambda _: None,
        floor=lambda m: m.nccl_intra_floor_gbps,
    ),
)


@dataclasses.dataclass(frozen=True)
class Figure:
    """One row of the table: a measurement, and what it is compared with."""

    name: str
    label: str
    unit: str
    measured: float | None
    spec: float | None = None
    floor: float | None = None
    per_gpu: tuple[float, ...] = ()
    suite: str = ""
    """The full suite's verdict on the same probe, from the report."""
    note: str = ""

    @property
    def of_spec(self) -> float | None:
        return _ratio(self.measured, self.spec)

    @property
    def of_floor(self) -> float | None:
        return _ratio(self.measured, self.floor)

    def as_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "unit": self.unit,
            "measured": _round(self.measured),
            "spec": self.spec,
            "floor": self.floor,
            "ofSpec": _round(self.of_spec, 3),
            "ofFloor": _round(self.of_floor, 3),
            "perGpu": [_round(v) for v in self.per_gpu],
            "suite": self.suite,
            "note": self.note,
        }


def _ratio(value: float | None, reference: float | None) -> float | None:
    return None if value is None or not reference else value / reference


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


# --- sweep -------------------------------------------------------------------


def time_sweeps(
    backend: Backend, *, sweeps: int, clock: Callable[[], float] = time.perf_counter
) -> tuple[list[float], NodeSample]:
    """Sample ``sweeps`` times; the wall seconds of each, and the last sample."""
    if sweeps < 1:
        raise ValueError("at least one sweep")
    seconds = []
    sample = None
    for _ in range(sweeps):
        started = clock()
        sample = backend.sample()
        seconds.append(clock() - started)
    assert sample is not None
    return seconds, sample


def sweep_stats(seconds: Sequence[float]) -> dict[str, float | int]:
    """p50 and max of the sweeps in milliseconds, and the first one on its own
    (the driver's caches are cold for it)."""
    ms = [s * 1000 for s in seconds]
    return {
        "sweeps": len(ms),
        "p50Ms": round(statistics.median(ms), 3),
        "maxMs": round(max(ms), 3),
        "firstMs": round(ms[0], 3),
    }


def node_model(sample: NodeSample) -> tuple[GpuModel | None, list[str]]:
    """The model gpuhealth's table has for the GPUs' NVML names, and the names."""
    names = sorted({g.identity.model.strip() for g in sample.gpus if g.identity.model.strip()})
    models = {model_for_nvml_name(name) for name in names}
    if len(models) == 1:
        return models.pop(), names
    return None, names


def nvml_surprises(sample: NodeSample, model: GpuModel | None) -> list[str]:
    """What a reader of the NVML backend would not expect from this node: reads
    that failed, fields this driver does not report, and shapes (NVLinks, PCIe)
    that differ from the model table. One line each, for the record."""
    found = [f"node: {text}" for _, text in sorted(sample.errors.items())]
    if sample.driver_version is None:
        found.append("node: no driver version reported")
    if sample.cuda_version is None:
        found.append("node: no CUDA driver version reported")
    if not sample.gpus:
        found.append("node: NVML reports no GPUs")
    _, names = node_model(sample)
    if model is None and names:
        found.append(f"node: {', '.join(names)} not in gpuhealth's model table: no spec, no floors")
    for gpu in sample.gpus:
        found.extend(_gpu_surprises(gpu, model))
    return found


def _gpu_surprises(gpu: GpuSample, model: GpuModel | None) -> list[str]:
    where = f"gpu{gpu.identity.index}"
    if gpu.lost:
        return [f"{where}: lost (NVML answered GPU_IS_LOST)"]
    found = []
    unreported = [f.name for f in dataclasses.fields(gpu) if getattr(gpu, f.name) is None]
    if unreported:
        found.append(
            f"{where}: no value from NVML (not supported here, or failed below): "
            f"{', '.join(unreported)}"
        )
    found.extend(f"{where}: {text}" for _, text in sorted(gpu.errors.items()))
    if gpu.mig_enabled:
        found.append(f"{where}: MIG mode is on")
    if model is None:
        return found
    links = len(gpu.nvlinks)
    active = sum(1 for link in gpu.nvlinks if link.active)
    if links != model.nvlink_links or active != links:
        found.append(
            f"{where}: {links} NVLinks reported, {active} active; the {model.name} row "
            f"has {model.nvlink_links}"
        )
    shape = (gpu.pcie_max_gen, gpu.pcie_max_width)
    if None not in shape and shape != (model.pcie_gen, model.pcie_width):
        found.append(
            f"{where}: PCIe max gen{gpu.pcie_max_gen} x{gpu.pcie_max_width}; the "
            f"{model.name} row has gen{model.pcie_gen} x{model.pcie_width}"
        )
    if None not in (gpu.pcie_width, gpu.pcie_max_width) and gpu.pcie_width != gpu.pcie_max_width:
        found.append(f"{where}: PCIe link at x{gpu.pcie_width} of x{gpu.pcie_max_width}")
    return found


def run_sweep(backend: Backend, *, sweeps: int, init_seconds: float) -> dict[str, Any]:
    """The ``sweep`` stage on a backend already open; closes it."""
    try:
        seconds, sample = time_sweeps(backend, sweeps=sweeps)
    finally:
        backend.close()
    model, names = node_model(sample)
    return {
        "backend": backend.name,
        "initMs": round(init_seconds * 1000, 3),
        **sweep_stats(seconds),
        "secondsEach": [round(s, 6) for s in seconds],
        "model": None if model is None else model.name,
        "gpuNames": names,
        "gpus": len(sample.gpus),
        "driver": sample.driver_version,
        "cuda": sample.cuda_version,
        "surprises": nvml_surprises(sample, model),
        "sample": to_json(sample),
    }


def to_json(value: Any) -> Any:
    """A sample as plain JSON: dataclasses, pydantic models, sets, enums, times."""
    return json.loads(json.dumps(value, default=_json_default))


def _json_default(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, frozenset | set):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


# --- probes ------------------------------------------------------------------


def time_probes(
    probes: Probes, *, gpus: Sequence[int], clock: Callable[[], float] = time.perf_counter
) -> list[dict[str, Any]]:
    """Every probe of the full suite, called directly: per GPU, then the
    all-reduce over all of them; the value unrounded, the wall seconds of the
    call (allocation and warm-up included), or the error it raised."""
    calls: list[tuple[str, int | None, str, Callable[[], float]]] = [
        (name, gpu, unit, _bound(probes, method, gpu))
        for gpu in gpus
        for name, (method, unit, _) in PER_GPU.items()
    ]
    calls.append((ALLREDUCE, None, "GB/s", probes.allreduce_busbw_gbps))
    runs = []
    for name, gpu, unit, call in calls:
        started = clock()
        value: float | None = None
        error = ""
        try:
            value = float(call())
        except Exception as problem:
            error = f"{type(problem).__name__}: {problem}"
        runs.append(
            {
                "name": name,
                "gpu": gpu,
                "value": value,
                "unit": unit,
                "seconds": round(clock() - started, 4),
                "error": error,
            }
        )
    return runs


def _bound(probes: Probes, method: str, gpu: int) -> Callable[[], float]:
    measure: Callable[[int], float] = getattr(probes, method)
    return lambda: measure(gpu)


def torch_facts(torch: Any) -> dict[str, Any]:
    """The PyTorch build and the devices it sees, for the record."""
    count = int(torch.cuda.device_count())
    try:
        nccl = torch.cuda.nccl.version()
    except Exception as error:
        nccl = f"unknown ({type(error).__name__})"
    return {
        "torch": str(torch.__version__),
        "torchCuda": str(torch.version.cuda),
        "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl),
        "devices": [str(torch.cuda.get_device_name(i)) for i in range(count)],
    }


# --- summary -----------------------------------------------------------------


def probe_figures(
    *, model: GpuModel | None, runs: Sequence[dict[str, Any]], report: Report | None, gpus: int
) -> list[Figure]:
    """One figure per probe: the weakest GPU's value (the one a floor judges)."""
    figures = []
    for probe in PROBE_FIGURES:
        mine = [r for r in runs if r["name"] == probe.name]
        values = tuple(float(r["value"]) for r in mine if r["value"] is not None)
        errors = sorted({r["error"] for r in mine if r["error"]})
        notes = [*errors]
        if probe.name == ALLREDUCE and gpus == 1 and values and max(values) == 0:
            notes.append(
                "one GPU: an all-reduce moves nothing between GPUs, so its busbw is 0 "
                "(algbw x 2(n-1)/n); the floor is for a whole board"
            )
        figures.append(
            Figure(
                name=probe.name,
                label=probe.label,
                unit=probe.unit,
                measured=min(values) if values else None,
                spec=None if model is None else probe.spec(model),
                floor=None if model is None else probe.floor(model),
                per_gpu=values if probe.name != ALLREDUCE else (),
                suite=suite_verdict(report, probe.name),
                note="; ".join(notes),
            )
        )
    return figures


def suite_verdict(report: Report | None, name: str) -> str:
    """What the full suite said about one probe: its status (each status with its
    GPUs where they differ) and the weakest value it observed."""
    if report is None:
        return "no report"
    found = [c for c in report.checks if c.name == name]
    if not found:
        return "not run"
    by_status: dict[str, list[str]] = {}
    for check in found:
        by_status.setdefault(check.status.value, []).append(
            "node" if check.gpu is None else f"gpu{check.gpu}"
        )
    observed = [c.observed for c in found if c.observed is not None]
    verdict = (
        next(iter(by_status))
        if len(by_status) == 1
        else ", ".join(f"{status} {' '.join(where)}" for status, where in by_status.items())
    )
    return f"{verdict}, {min(observed):.1f}" if observed else verdict


def timing_figures(
    *, sweep: dict[str, Any] | None, check: dict[str, Any] | None, report: Report | None
) -> list[Figure]:
    """The sweep's times and the full suite's wall time: no spec to hold them to."""
    figures = []
    if sweep is not None:
        figures += [
            Figure("nvml-sweep-p50", "NVML sweep, p50", "ms", sweep["p50Ms"]),
            Figure("nvml-sweep-max", "NVML sweep, max", "ms", sweep["maxMs"]),
            Figure("nvml-sweep-first", "NVML sweep, first", "ms", sweep["firstMs"]),
        ]
    if check is not None:
        verdict = "" if report is None else ", healthy" if report.healthy else ", unhealthy"
        figures.append(
            Figure(
                "check",
                f"gpuhealth check --suite {check['suite']}",
                "s",
                check["seconds"],
                suite=f"exit {check['rc']}{verdict}",
            )
        )
    return figures


def render_table(figures: Sequence[Figure]) -> str:
    header = ("figure", "unit", "measured", "spec", "x spec", "floor", "x floor", "full suite")
    rows = [
        (
            f.label,
            f.unit,
            _cell(f.measured, 2 if f.unit == "ms" else 1),
            _cell(f.spec, 1),
            _cell(f.of_spec, 2),
            _cell(f.floor, 1),
            _cell(f.of_floor, 2),
            f.suite,
        )
        for f in figures
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(width) if i in (0, 1, 7) else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in (header, *rows)
    ]
    notes = [f"{f.label}: {f.note}" for f in figures if f.note]
    return "\n".join([*lines, *(["", *notes] if notes else [])])


def _cell(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def suite_summary(report: Report | None, check: dict[str, Any] | None) -> dict[str, Any]:
    """The full suite's counts by status, and every check that did not pass."""
    if report is None:
        return {"rc": None if check is None else check["rc"], "report": False}
    counts = {s.value: sum(1 for c in report.checks if c.status is s) for s in CheckStatus}
    return {
        "rc": None if check is None else check["rc"],
        "report": True,
        "counts": {status: n for status, n in counts.items() if n},
        "notPassing": [
            {"name": c.name, "gpu": c.gpu, "status": c.status.value, "message": c.message}
            for c in report.checks
            if c.status not in (CheckStatus.PASS, CheckStatus.SKIPPED)
        ],
    }


def summarize(out: Path, *, with_probes: bool = True) -> tuple[str, dict[str, Any], bool]:
    """The printed summary, the one-line record, and whether every stage left its file."""
    sweep = _load(out / "sweep.json")
    probes = _load(out / "probes.json")
    check = _load(out / "check.json")
    report = _load_report(out / "report.json")
    model = None
    if sweep is not None and sweep["model"]:
        model = get_model(sweep["model"])
    elif report is not None and report.gpus:
        model = model_for_nvml_name(report.gpus[0].model)
    gpus = sweep["gpus"] if sweep is not None else len(report.gpus) if report is not None else 0
    figures = [
        *probe_figures(
            model=model, runs=probes["runs"] if probes else [], report=report, gpus=gpus
        ),
        *timing_figures(sweep=sweep, check=check, report=report),
    ]
    files = {"sweep.json": sweep, "check.json": check, "report.json": report}
    if with_probes:
        files["probes.json"] = probes
    record = {
        "schema": SCHEMA,
        "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "node": socket.gethostname(),
        "model": None if model is None else model.name,
        "gpus": gpus,
        "gpuNames": sweep["gpuNames"]
        if sweep
        else sorted({g.model for g in report.gpus})
        if report
        else [],
        "driver": sweep["driver"] if sweep else None,
        "cuda": sweep["cuda"] if sweep else None,
        "sweeps": sweep["sweeps"] if sweep else 0,
        "facts": probes.get("facts", {}) if probes else {},
        "figures": {f.name: f.as_json() for f in figures},
        "suite": suite_summary(report, check),
        "surprises": sweep["surprises"] if sweep else [],
        "missing": [name for name, loaded in files.items() if loaded is None],
    }
    return render_summary(record, figures), record, not record["missing"]


def render_summary(record: dict[str, Any], figures: Sequence[Figure]) -> str:
    """The machine in two lines, the table, then what did not pass and what surprised."""
    facts = record["facts"]
    lines = [
        f"node {record['node']}: {record['gpus']} x {', '.join(record['gpuNames']) or '?'} "
        f"(gpuhealth model {record['model'] or 'unknown'}), driver {record['driver']}, "
        f"CUDA {record['cuda']}",
        f"torch {facts['torch']} (CUDA {facts.get('torchCuda')}, NCCL {facts.get('nccl')})"
        if facts.get("torch")
        else "probes: " + ("simulated" if facts else "not run"),
        f"NVML sweep: {record['sweeps']} sweeps of all GPUs",
        "",
        render_table(figures),
    ]
    not_passing = record["suite"].get("notPassing", [])
    if not_passing:
        lines += ["", "full suite, not passing:"]
        lines += [
            f"  {c['status']:5} {c['name']} {'node' if c['gpu'] is None else 'gpu' + str(c['gpu'])}"
            f": {c['message']}"
            for c in not_passing
        ]
    if record["surprises"]:
        lines += ["", "NVML surprises:", *(f"  {line}" for line in record["surprises"])]
    if record["missing"]:
        lines += ["", f"missing: {', '.join(record['missing'])} (a stage failed: see above)"]
    return "\n".join(lines)


def _load(path: Path) -> dict[str, Any] | None:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def _load_report(path: Path) -> Report | None:
    try:
        return _load_report_text(path.read_text())
    except OSError:
        return None


def _load_report_text(text: str) -> Report | None:
    try:
        return Report.model_validate_json(text)
    except pydantic.ValidationError:
        return None


# --- reset --------------------------------------------------------------------


def reset_beside_agent(
    backend: Backend,
    *,
    reset: Callable[[], tuple[int, str]],
    users: Callable[[], list[str]],
    reacquire_for: float = 30.0,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Reset GPU 0 beside the agent's backend: first while it holds NVML (what the
    agent did before it released for resets: expected refused, "in use"), then after
    :meth:`Backend.release` (expected done), then open the backend again (tried for up
    to ``reacquire_for`` s while the driver comes back) and sample. Never while another
    process uses the GPU: the reset would kill its work."""
    others = users()
    if others:
        return {"skipped": f"GPU 0 is in use by {', '.join(others)}: no reset"}
    backend.sample()
    held_rc, held_output = reset()
    backend.release()
    released_rc, released_output = reset()
    started = clock()
    while True:
        try:
            backend.reacquire()
            break
        except GpuhealthError:
            if clock() - started > reacquire_for:
                raise
            time.sleep(0.5)
    reopened = clock() - started
    after = backend.sample()
    return {
        "heldRc": held_rc,
        "heldOutput": held_output,
        "releasedRc": released_rc,
        "releasedOutput": released_output,
        "reacquireMs": round(reopened * 1000, 1),
        "gpusAfter": len(after.gpus),
        "lostAfter": [g.identity.index for g in after.gpus if g.lost],
    }


# --- commands ----------------------------------------------------------------


def _sweep(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    backend: Backend = (
        _sim_backend(args.sim, gpus=args.gpus) if args.sim else NvmlBackend(kernel_log=KMSG)
    )
    result = run_sweep(backend, sweeps=args.sweeps, init_seconds=time.perf_counter() - started)
    _write(args.out / "sweep.json", result)
    print(
        f"NVML sweep ({result['backend']}): {result['sweeps']} sweeps of {result['gpus']} "
        f"GPU{'' if result['gpus'] == 1 else 's'}: "
        f"p50 {result['p50Ms']:.2f} ms, max {result['maxMs']:.2f} ms, first "
        f"{result['firstMs']:.2f} ms; backend open {result['initMs']:.1f} ms"
    )
    for line in result["surprises"]:
        print(f"  surprise: {line}")
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    command = [
        sys.executable,
        "-m",
        "gpuhealth.cli",
        "check",
        "--suite",
        args.suite,
        "--json",
        *args.check_args,
    ]
    print(f"running: gpuhealth {' '.join(command[3:])}", flush=True)
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=args.timeout, check=False
        )
        rc, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        rc, stdout = 124, ""
        stderr = f"timed out after {expired.timeout:.0f} s"
    seconds = time.perf_counter() - started
    (args.out / "report.json").write_text(stdout)
    _write(
        args.out / "check.json",
        {
            "command": command[3:],
            "suite": args.suite,
            "rc": rc,
            "seconds": round(seconds, 3),
            "stderr": stderr,
        },
    )
    report = _load_report(args.out / "report.json")
    verdict = "no report" if report is None else "healthy" if report.healthy else "unhealthy"
    print(f"gpuhealth check --suite {args.suite}: exit {rc} in {seconds:.1f} s, {verdict}")
    if stderr.strip():
        print(f"  stderr: {stderr.strip()}")
    return EXIT_OK if report is not None else EXIT_INCOMPLETE


def _probes(args: argparse.Namespace) -> int:
    probes: Probes
    facts: dict[str, Any]
    if args.sim:
        backend = _sim_backend(args.sim, gpus=args.gpus)
        probes, gpus, facts = SimProbes(backend), list(range(args.gpus)), {"torch": None}
    else:
        from gpuhealth.active.torch_probes import TorchProbes  # noqa: PLC0415 - optional

        torch_probes = TorchProbes()
        facts = torch_facts(torch_probes.torch)
        probes, gpus = torch_probes, list(range(len(facts["devices"])))
    runs = time_probes(probes, gpus=gpus)
    _write(args.out / "probes.json", {"facts": facts, "runs": runs})
    for run in runs:
        where = "node" if run["gpu"] is None else f"gpu{run['gpu']}"
        value = run["error"] or f"{run['value']:.1f} {run['unit']}"
        print(f"probe {run['name']:15} {where:5} {value} ({run['seconds']:.2f} s)")
    return EXIT_OK if all(not r["error"] for r in runs) else EXIT_INCOMPLETE


def _reset(args: argparse.Namespace) -> int:
    smi = args.nvidia_smi

    def reset() -> tuple[int, str]:
        done = subprocess.run(
            [smi, "--gpu-reset", "-i", "0"], capture_output=True, text=True, check=False
        )
        return done.returncode, (done.stdout + done.stderr).strip()

    def users() -> list[str]:
        query = [smi, "--query-compute-apps=pid,process_name", "--format=csv,noheader", "-i", "0"]
        done = subprocess.run(query, capture_output=True, text=True, check=True)
        return [line.strip() for line in done.stdout.splitlines() if line.strip()]

    result = reset_beside_agent(NvmlBackend(kernel_log=None), reset=reset, users=users)
    _write(args.out / "reset.json", result)
    if "skipped" in result:
        print(f"reset: skipped: {result['skipped']}")
        return EXIT_INCOMPLETE
    print(
        f"reset with NVML held: exit {result['heldRc']} ({result['heldOutput']}); "
        f"after the release: exit {result['releasedRc']} ({result['releasedOutput']}); "
        f"NVML open again in {result['reacquireMs']:.0f} ms, {result['gpusAfter']} GPUs, "
        f"lost {result['lostAfter'] or 'none'}"
    )
    return EXIT_OK if result["releasedRc"] == 0 else EXIT_INCOMPLETE


def _summarize(args: argparse.Namespace) -> int:
    table, record, complete = summarize(args.out, with_probes=not args.without_probes)
    (args.out / "table.txt").write_text(table + "\n")
    (args.out / "figures.jsonl").write_text(json.dumps(record, separators=(",", ":")) + "\n")
    print(table)
    return EXIT_OK if complete else EXIT_INCOMPLETE


def _sim_backend(model: str, *, gpus: int) -> SimBackend:
    """Exact simulated GPUs (no noise): a dry run checks this script, so it reads
    the same every time."""
    return SimBackend(node="hardware-check", model=get_model(model), gpus=gpus, noise=0)


def _write(path: Path, payload: dict[str, Any]) -> None:
    path.write_text(json.dumps(payload, indent=2) + "\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="measure.py", description=__doc__.splitlines()[0])
    stages = parser.add_subparsers(dest="stage", required=True)
    for name, handler in (
        ("sweep", _sweep),
        ("check", _check),
        ("probes", _probes),
        ("reset", _reset),
        ("summarize", _summarize),
    ):
        stage = stages.add_parser(name)
        stage.add_argument("--out", type=Path, required=True, help="folder for this stage's file")
        stage.set_defaults(handler=handler)
        if name in ("sweep", "probes"):
            stage.add_argument("--sim", metavar="MODEL", help="simulated GPUs instead of real ones")
            stage.add_argument("--gpus", type=int, default=1, help="simulated GPU count")
        if name == "sweep":
            stage.add_argument("--sweeps", type=int, default=100)
        if name == "reset":
            stage.add_argument("--nvidia-smi", default="nvidia-smi")
        if name == "summarize":
            stage.add_argument(
                "--without-probes", action="store_true", help="the probes stage was left out"
            )
        if name == "check":
            stage.add_argument("--suite", choices=["full", "passive"], default="full")
            stage.add_argument("--timeout", type=float, default=600.0)
            stage.add_argument(
                "check_args", nargs="*", help="more arguments for gpuhealth check (after --)"
            )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        return int(args.handler(args))
    except (GpuhealthError, OSError, ValueError) as error:
        print(f"hardware check: {args.stage}: {error}", file=sys.stderr)
        return EXIT_CANNOT_RUN


if __name__ == "__main__":
    sys.exit(main())

"""The hardware check's figures, without a GPU: sweep times, NVML surprises, the
table against the model's spec and floors, and the stages on simulated GPUs.

``tests/hardware/measure.py`` is a script beside ``run.sh``, not a package
module, so it is loaded from its path.
"""

from __future__ import annotations

import datetime
import importlib.util
import itertools
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gpuhealth.active.sim import SimProbes
from gpuhealth.backends.sim import SimBackend
from gpuhealth.faults import ProbeError
from gpuhealth.models import get_model
from gpuhealth.report import CheckResult, CheckStatus, GpuIdentity, Report
from gpuhealth.samples import GpuSample, NodeSample, NvLinkSample

ROOT = Path(__file__).resolve().parents[3]
H200 = get_model("H200")
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def load_measure() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "hardware_measure", ROOT / "tests/hardware/measure.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being made
    spec.loader.exec_module(module)
    return module


measure = load_measure()


def ticking(step: float = 0.5) -> Any:
    """A clock that moves ``step`` seconds at every reading."""
    counter = itertools.count()
    return lambda: next(counter) * step


def run(name: str, gpu: int | None, value: float | None, error: str = "") -> dict[str, Any]:
    return {"name": name, "gpu": gpu, "value": value, "unit": "", "seconds": 0.1, "error": error}


def h200(index: int, **fields: Any) -> GpuSample:
    return GpuSample(identity=GpuIdentity(index=index, model="NVIDIA H200"), **fields)


def test_sweep_stats_are_the_median_and_the_maximum_in_milliseconds() -> None:
    stats = measure.sweep_stats([0.010, 0.002, 0.003, 0.004])
    assert stats == {"sweeps": 4, "p50Ms": 3.5, "maxMs": 10.0, "firstMs": 10.0}


def test_each_sweep_is_timed_on_its_own() -> None:
    backend = SimBackend(node="n1", model=H200, gpus=2, noise=0)
    seconds, sample = measure.time_sweeps(backend, sweeps=3, clock=ticking(0.5))
    assert seconds == [0.5, 0.5, 0.5]
    assert len(sample.gpus) == 2


def test_a_healthy_simulated_node_has_no_nvml_surprises() -> None:
    sample = SimBackend(node="n1", model=H200, gpus=2, noise=0).sample()
    assert measure.node_model(sample) == (H200, ["NVIDIA H200"])
    assert measure.nvml_surprises(sample, H200) == []


def test_failed_reads_unreported_fields_and_odd_links_are_surprises() -> None:
    gpu = h200(
        0,
        pcie_max_gen=4,
        pcie_max_width=16,
        pcie_width=8,
        nvlinks=(NvLinkSample(link=0, active=False),),
        errors={"ecc": "NVML ecc: Unknown Error"},
    )
    sample = NodeSample(
        time=NOW,
        gpus=(gpu, h200(1, lost=True)),
        driver_version="580.159.03",
        cuda_version="13.0",
        errors={"xid": "cannot read /dev/kmsg: No such file or directory"},
    )
    found = measure.nvml_surprises(sample, H200)
    assert found[0] == "node: cannot read /dev/kmsg: No such file or directory"
    unreported = next(line for line in found if "no value from NVML" in line)
    assert unreported.startswith(
        "gpu0: no value from NVML (not supported here, or failed below): temperature_c,"
    )
    assert "pcie_gen" in unreported
    assert "pcie_width" not in unreported
    assert "gpu0: NVML ecc: Unknown Error" in found
    assert "gpu0: 1 NVLinks reported, 0 active; the H200 row has 18" in found
    assert "gpu0: PCIe max gen4 x16; the H200 row has gen5 x16" in found
    assert "gpu0: PCIe link at x8 of x16" in found
    assert found[-1] == "gpu1: lost (NVML answered GPU_IS_LOST)"


def test_a_model_missing_from_the_table_is_named_and_has_no_spec() -> None:
    sample = NodeSample(
        time=NOW, gpus=(GpuSample(identity=GpuIdentity(index=0, model="NVIDIA B300")),)
    )
    model, names = measure.node_model(sample)
    assert (model, names) == (None, ["NVIDIA B300"])
    assert (
        "node: NVIDIA B300 not in gpuhealth's model table: no spec, no floors"
        in measure.nvml_surprises(sample, model)
    )
    figures = measure.probe_figures(model=None, runs=[run("gemm", 0, 700.0)], report=None, gpus=1)
    assert (figures[0].measured, figures[0].spec, figures[0].floor) == (700.0, None, None)
    assert figures[0].of_spec is None


def test_the_weakest_gpu_is_held_against_the_spec_and_the_floor() -> None:
    runs = [run("gemm", 0, 800.0), run("gemm", 1, 700.0), run("hbm", 0, 4300.0)]
    gemm, hbm, pcie, allreduce = measure.probe_figures(model=H200, runs=runs, report=None, gpus=2)
    assert (gemm.measured, gemm.per_gpu, gemm.spec, gemm.floor) == (
        700.0,
        (800.0, 700.0),
        989.4,
        600,
    )
    assert gemm.of_spec == pytest.approx(700 / 989.4)
    assert gemm.of_floor == pytest.approx(700 / 600)
    assert hbm.of_spec == pytest.approx(4300 / 4800)
    assert (pcie.spec, pcie.floor, pcie.measured) == (64.0, 40, None)
    assert (allreduce.spec, allreduce.floor) == (None, 431)


def test_a_probe_that_raised_has_no_figure_and_says_why() -> None:
    runs = [run("gemm", 0, None, error="ProbeUnavailableError: PyTorch sees no CUDA device")]
    (gemm, *_) = measure.probe_figures(model=H200, runs=runs, report=None, gpus=1)
    assert gemm.measured is None
    assert gemm.note == "ProbeUnavailableError: PyTorch sees no CUDA device"


def test_a_zero_all_reduce_on_one_gpu_is_explained() -> None:
    *_, allreduce = measure.probe_figures(
        model=H200, runs=[run("nccl-allreduce", None, 0.0)], report=None, gpus=1
    )
    assert allreduce.measured == 0.0
    assert allreduce.note.startswith("one GPU: an all-reduce moves nothing between GPUs")


def test_the_suite_column_names_each_status_with_its_gpus_where_they_differ() -> None:
    report = Report(
        node="n1",
        time=NOW,
        backend="nvml",
        suite="full",
        checks=[
            CheckResult(name="gemm", status=CheckStatus.PASS, gpu=0, observed=790.0),
            CheckResult(name="gemm", status=CheckStatus.FAIL, gpu=1, observed=410.5),
            CheckResult(name="hbm", status=CheckStatus.PASS, gpu=0, observed=4301.0),
            CheckResult(name="nccl-allreduce", status=CheckStatus.ERROR, message="no NCCL"),
        ],
    )
    assert measure.suite_verdict(report, "gemm") == "pass gpu0, fail gpu1, 410.5"
    assert measure.suite_verdict(report, "hbm") == "pass, 4301.0"
    assert measure.suite_verdict(report, "nccl-allreduce") == "error"
    assert measure.suite_verdict(report, "pcie-bandwidth") == "not run"
    assert measure.suite_verdict(None, "gemm") == "no report"


def test_the_table_has_a_row_per_figure_and_a_dash_where_there_is_no_spec() -> None:
    figures = [
        measure.Figure("gemm", "bf16 GEMM 8192^3", "TF/s", 790.0, spec=989.4, floor=600.0),
        measure.Figure("nvml-sweep-p50", "NVML sweep, p50", "ms", 1.234),
    ]
    header, gemm, sweep = measure.render_table(figures).splitlines()
    assert header.split()[:3] == ["figure", "unit", "measured"]
    assert gemm.split()[-5:] == ["790.0", "989.4", "0.80", "600.0", "1.32"]
    assert sweep.split()[-5:] == ["1.23", "-", "-", "-", "-"]


def test_the_probes_run_per_gpu_then_the_all_reduce_once_and_errors_are_kept() -> None:
    backend = SimBackend(node="n1", model=H200, gpus=2, noise=0)
    backend.set_faults([ProbeError(type="probe-error", probe="hbm", gpu=1)])
    runs = measure.time_probes(SimProbes(backend), gpus=[0, 1], clock=ticking())
    assert [(r["name"], r["gpu"]) for r in runs] == [
        ("gemm", 0),
        ("hbm", 0),
        ("pcie-bandwidth", 0),
        ("gemm", 1),
        ("hbm", 1),
        ("pcie-bandwidth", 1),
        ("nccl-allreduce", None),
    ]
    broken = runs[4]
    assert broken["value"] is None
    assert broken["error"] == "RuntimeError: simulated hbm probe crash on GPU 1"
    assert all(r["seconds"] == 0.5 for r in runs)


def test_the_stages_on_simulated_gpus_leave_one_json_line_with_every_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path)
    assert (
        measure.main(["sweep", "--out", out, "--sim", "H200", "--gpus", "2", "--sweeps", "4"]) == 0
    )
    assert measure.main(["probes", "--out", out, "--sim", "H200", "--gpus", "2"]) == 0
    sim_check = ["--", "--backend", "sim", "--gpu-model", "H200", "--gpus", "2"]
    assert measure.main(["check", "--out", out, *sim_check]) == 0
    assert measure.main(["summarize", "--out", out]) == 0
    printed = capsys.readouterr().out
    assert "bf16 GEMM 8192^3" in printed
    (line,) = (tmp_path / "figures.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["schema"] == "pitcrew.dev/hardware-check/v1"
    assert (record["model"], record["gpus"], record["missing"]) == ("H200", 2, [])
    assert set(record["figures"]) == {
        "gemm",
        "hbm",
        "pcie-bandwidth",
        "nccl-allreduce",
        "nvml-sweep-p50",
        "nvml-sweep-max",
        "nvml-sweep-first",
        "check",
    }
    assert record["figures"]["gemm"]["perGpu"] == [690.0, 690.0]
    assert record["suite"]["rc"] == 0
    assert record["suite"]["notPassing"] == []
    assert json.loads((tmp_path / "check.json").read_text())["command"][:3] == [
        "check",
        "--suite",
        "full",
    ]
    assert (tmp_path / "table.txt").read_text().startswith("node ")


def test_a_stage_that_left_no_file_makes_the_summary_incomplete(tmp_path: Path) -> None:
    out = str(tmp_path)
    assert measure.main(["sweep", "--out", out, "--sim", "H200", "--sweeps", "2"]) == 0
    table, record, complete = measure.summarize(tmp_path)
    assert not complete
    assert record["missing"] == ["check.json", "report.json", "probes.json"]
    assert "missing: check.json, report.json, probes.json (a stage failed" in table
    assert measure.main(["summarize", "--out", out]) == 1
    _, record, _ = measure.summarize(tmp_path, with_probes=False)
    assert record["missing"] == ["check.json", "report.json"]


def test_a_stage_that_cannot_start_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert measure.main(["sweep", "--out", str(tmp_path), "--sim", "B300"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("hardware check: sweep: unknown GPU model 'B300'")


def test_the_reset_stage_resets_only_after_the_agents_backend_released_nvml(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The driver refuses a reset while a process holds NVML; the fake nvidia-smi here
    does the same, so the stage shows the refusal held and the reset released."""
    from gpuhealth.backends.nvml import NvmlBackend  # noqa: PLC0415 - after the fake
    from support.fake_pynvml import fake_pynvml  # noqa: PLC0415

    nvml = fake_pynvml(lost=set(), broken_ecc=set())
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    backend = NvmlBackend(kernel_log=None, sysfs_ib=tmp_path / "none")

    def reset() -> tuple[int, str]:
        if nvml.inits > nvml.shutdowns:
            return 255, "GPU 00000000:18:00.0 is currently in use by another process."
        return 0, "GPU 00000000:18:00.0 was successfully reset."

    result = measure.reset_beside_agent(backend, reset=reset, users=list)
    assert (result["heldRc"], result["releasedRc"]) == (255, 0)
    assert (result["gpusAfter"], result["lostAfter"]) == (2, [])
    assert nvml.inits == 2  # opened again after the reset


def test_the_reset_stage_never_resets_a_gpu_another_process_uses() -> None:
    backend = SimBackend(node="n", model=H200, gpus=1, noise=0)
    result = measure.reset_beside_agent(
        backend, reset=lambda: pytest.fail("reset"), users=lambda: ["4242, python"]
    )
    assert "4242, python" in result["skipped"]

"""The gpuhealth CLI's exit codes and output, the runner's error handling,
the fault vocabulary's errors, and the probes' behaviour without hardware."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from gpuhealth import cli
from gpuhealth.active import nccl_tests
from gpuhealth.active.probes import ProbeFailedError, ProbeUnavailableError
from gpuhealth.active.sim import HEADROOM
from gpuhealth.active.torch_probes import TorchProbes
from gpuhealth.backends.base import BackendUnavailableError
from gpuhealth.backends.sim import SimBackend
from gpuhealth.cli import main
from gpuhealth.faults import FaultListError, IbFlapping, dump_faults, parse_faults
from gpuhealth.models import get_model
from gpuhealth.report import CheckStatus, Report
from gpuhealth.runner import Checker, UnknownCheckError
from gpuhealth.samples import NodeSample

DATA = Path(__file__).parent / "data"


def scenario(tmp_path: Path, text: str) -> str:
    path = tmp_path / "scenario.json"
    path.write_text(text)
    return str(path)


def test_healthy_sim_node_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--backend", "sim"]) == 0
    assert "HEALTHY" in capsys.readouterr().out


def test_faulty_sim_node_exits_one_with_a_json_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = scenario(tmp_path, '[{"type": "xid", "gpu": 3, "code": 79}]')
    assert main(["check", "--backend", "sim", "--scenario", path, "--json"]) == 1
    report = Report.model_validate_json(capsys.readouterr().out)
    assert report.api_version == "gpuhealth.dev/v1"
    assert any(
        c.name == "xid" and c.gpu == 3 and c.status is CheckStatus.FAIL for c in report.checks
    )
    assert len(report.gpus) == 8


def test_full_suite_runs_active_probes_on_sim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = scenario(tmp_path, '[{"type": "slow-gemm", "gpu": 4, "factor": 3}]')
    argv = ["check", "--backend", "sim", "--suite", "full", "--scenario", path, "--json"]
    assert main(argv) == 1
    report = Report.model_validate_json(capsys.readouterr().out)
    assert {"gemm", "hbm", "pcie-bandwidth", "nccl-allreduce"} <= {c.name for c in report.checks}
    failing = [(c.name, c.gpu) for c in report.checks if c.status is CheckStatus.FAIL]
    assert failing == [("gemm", 4)]
    floor = get_model("H100").gemm_floor_tflops
    gemm = {c.gpu: c for c in report.checks if c.name == "gemm"}
    assert set(gemm) == set(range(8))
    slow = gemm.pop(4)
    assert slow.threshold == floor
    assert slow.observed == pytest.approx(floor * HEADROOM / 3, abs=0.05)
    for healthy in gemm.values():
        assert healthy.status is CheckStatus.PASS
        assert healthy.observed == pytest.approx(floor * HEADROOM, abs=0.05)


def test_missing_nvml_exits_two(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--backend", "nvml", "--kernel-log", ""]) == 2
    assert "NVML not available" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[{", "fault list is not JSON"),
        ('[{"type": "xid", "gpu": 1}]', "entry 0.xid.code: Field required"),
        ('[{"type": "meltdown", "gpu": 1}]', "does not match any of the expected tags"),
        ('[{"type": "xid", "gpu": 99, "code": 79}]', "less than or equal to 63"),
    ],
)
def test_bad_scenario_exits_two_naming_the_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    assert main(["check", "--backend", "sim", "--scenario", scenario(tmp_path, text)]) == 2
    assert message in capsys.readouterr().err


def test_parse_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    one_node = str(DATA / "nccl_allreduce_8xh100.txt")
    # 457.59 GB/s on one 8-GPU H100 host: under the in-node floor (460), so a failure,
    assert main(["parse", "nccl-tests", one_node, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["peakBusbwGBps"] == pytest.approx(457.59)
    # unless the operator of the fleet set its own floor.
    assert main(["parse", "nccl-tests", one_node, "--floor", "450"]) == 0
    capsys.readouterr()
    assert main(["parse", "dcgm-diag", str(DATA / "dcgmi_diag_r3.json"), "--json"]) == 1
    capsys.readouterr()
    assert main(["parse", "kmsg", str(DATA / "dmesg_xid.txt"), "--json"]) == 1
    xids = json.loads(capsys.readouterr().out)["xids"]
    assert [(x["code"], x["faultClass"]) for x in xids] == [(13, "application"), (79, "fatal")]


def test_parse_of_truncated_input_exits_two(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "nccl-tests", str(DATA / "nccl_allreduce_truncated.txt")]) == 2
    assert "summary lines missing" in capsys.readouterr().err


def test_a_fault_list_over_64_kib_is_refused_unread() -> None:
    with pytest.raises(FaultListError, match="over the 65536 read"):
        parse_faults("[" + " " * 70_000 + "]")


def test_fault_list_round_trips() -> None:
    faults = parse_faults('[{"type": "ib-flapping", "port": "mlx5_0/1", "per_hour": 4}]')
    assert faults == [IbFlapping(type="ib-flapping", port="mlx5_0/1", per_hour=4)]
    assert parse_faults(dump_faults(faults)) == faults
    with pytest.raises(FaultListError):
        parse_faults('{"type": "xid"}')


class HangingBackend:
    name = "hanging"

    def sample(self) -> NodeSample:
        time.sleep(5)
        raise AssertionError("unreachable in the test")

    def close(self) -> None:
        """Nothing to release."""


class BrokenBackend(HangingBackend):
    name = "broken"

    def sample(self) -> NodeSample:
        raise RuntimeError("NVML: Unknown Error")


def test_hung_sample_is_an_error_report_not_a_hang() -> None:
    checker = Checker(backend=HangingBackend(), node="n1", sample_timeout=0.1)
    report = checker.run()
    assert [(c.name, c.status) for c in report.checks] == [("backend", CheckStatus.ERROR)]
    assert "timed out" in report.checks[0].message
    assert report.healthy  # could not check is not evidence against the GPU


def test_failing_backend_is_an_error_report() -> None:
    report = Checker(backend=BrokenBackend(), node="n1").run()
    assert report.checks[0].status is CheckStatus.ERROR
    assert "NVML: Unknown Error" in report.checks[0].message


def test_unknown_disabled_check_is_refused() -> None:
    with pytest.raises(UnknownCheckError, match="nvlinks"):
        Checker(
            backend=SimBackend(node="n", model=get_model("H100")), node="n", disabled=["nvlinks"]
        )


def fake_all_reduce_perf(tmp_path: Path, output: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = tmp_path / "all_reduce_perf"
    binary.write_text(
        f"#!{sys.executable}\nimport sys\nsys.stdout.write(open({str(output)!r}).read())\n"
    )
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_nccl_tests_probe_parses_the_binarys_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_all_reduce_perf(tmp_path, DATA / "nccl_allreduce_8xh100.txt", monkeypatch)
    assert nccl_tests.available()
    assert nccl_tests.run_allreduce(gpus=8) == pytest.approx(457.59)


def test_nccl_tests_probe_fails_on_wrong_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_all_reduce_perf(tmp_path, DATA / "nccl_allreduce_wrong_data.txt", monkeypatch)
    with pytest.raises(ProbeFailedError, match="3072 out-of-bounds"):
        nccl_tests.run_allreduce(gpus=8)


def test_torch_probes_without_torch_say_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ProbeUnavailableError, match=r"pip install 'pitcrew-operator\[active\]'"):
        TorchProbes()


def test_multinode_allreduce_without_rendezvous_exits_two(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert main(["allreduce", "--gpu-model", "H100"]) == 2
    assert "needs MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE set" in capsys.readouterr().out


def test_a_crashed_probe_exits_two_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = scenario(tmp_path, '[{"type": "probe-error", "probe": "gemm", "gpu": 2}]')
    argv = ["check", "--backend", "sim", "--suite", "full", "--scenario", path, "--json"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    report = Report.model_validate_json(captured.out)
    errors = [(c.name, c.gpu) for c in report.checks if c.status is CheckStatus.ERROR]
    assert errors == [("gemm", 2)]
    assert report.healthy  # an error is not a failure, but not a pass either
    assert "could not run 1 check(s): gemm (gpu 2):" in captured.err
    assert "simulated gemm probe crash on GPU 2" in captured.err


@pytest.mark.parametrize("suite", ["quick", "full"])
def test_every_gpu_s_probe_crashing_exits_two(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suite: str
) -> None:
    faults = (
        '[{"type": "probe-error", "probe": "hbm"},'
        ' {"type": "probe-error", "probe": "nccl-allreduce"}]'
    )
    path = scenario(tmp_path, faults)
    assert main(["check", "--backend", "sim", "--suite", suite, "--scenario", path]) == 2
    captured = capsys.readouterr()
    assert "hbm (gpu 0,1,2,3,4,5,6,7): probe failed: RuntimeError" in captured.err
    assert ("nccl-allreduce: probe failed" in captured.err) is (suite == "full")
    assert "HEALTHY" in captured.out


def test_a_failure_outranks_a_probe_that_could_not_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = scenario(
        tmp_path,
        '[{"type": "probe-error", "probe": "gemm"}, {"type": "slow-hbm", "gpu": 1, "factor": 2}]',
    )
    assert main(["check", "--backend", "sim", "--suite", "quick", "--scenario", path]) == 1
    assert "UNHEALTHY" in capsys.readouterr().out


def test_a_passive_suite_does_not_run_probes_so_a_probe_fault_is_moot(tmp_path: Path) -> None:
    path = scenario(tmp_path, '[{"type": "probe-error", "probe": "gemm"}]')
    assert main(["check", "--backend", "sim", "--scenario", path]) == 0


def test_probe_error_fault_refuses_an_unknown_probe() -> None:
    with pytest.raises(FaultListError, match="probe"):
        parse_faults('[{"type": "probe-error", "probe": "gemmm"}]')


def test_a_pcie_sku_on_the_cli_is_judged_by_its_own_floors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["check", "--backend", "sim", "--gpu-model", "H100-PCIE", "--suite", "quick", "--json"]
    assert main(argv) == 0
    report = Report.model_validate_json(capsys.readouterr().out)
    assert {c.threshold for c in report.checks if c.name == "gemm"} == {
        get_model("H100-PCIE").gemm_floor_tflops
    }
    assert {g.model for g in report.gpus} == {"NVIDIA H100 PCIe"}


def test_an_unknown_short_model_name_exits_two(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--backend", "sim", "--gpu-model", "H100-SXM"]) == 2
    assert "unknown GPU model 'H100-SXM'" in capsys.readouterr().err


def busbw(monkeypatch: pytest.MonkeyPatch, value: float) -> None:
    from gpuhealth.active import torch_probes  # noqa: PLC0415

    monkeypatch.setattr(torch_probes, "multinode_allreduce_busbw", lambda: value)


def test_allreduce_takes_the_floor_of_the_gpu_nvml_names(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    busbw(monkeypatch, 30.0)  # above an A100's 22 GB/s per NIC, below an H100's 46
    monkeypatch.setattr(cli, "nvml_device_name", lambda index: "NVIDIA A100 80GB PCIe")
    assert main(["allreduce", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["status"], result["threshold"]) == ("pass", 22)


def test_allreduce_on_an_unknown_gpu_exits_two_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    busbw(monkeypatch, 500.0)
    monkeypatch.setattr(cli, "nvml_device_name", lambda index: "NVIDIA H100")
    assert main(["allreduce"]) == 2
    captured = capsys.readouterr()
    assert "unknown GPU model 'NVIDIA H100'; known: " in captured.err
    assert "PASS" not in captured.out


def test_allreduce_without_nvml_asks_for_the_model(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_nvml(index: int) -> str:
        raise BackendUnavailableError("NVML not available: no driver")

    busbw(monkeypatch, 500.0)
    monkeypatch.setattr(cli, "nvml_device_name", no_nvml)
    assert main(["allreduce"]) == 2
    err = capsys.readouterr().err
    assert "NVML not available: no driver" in err
    assert "pass --gpu-model or --floor" in err


def test_allreduce_with_a_floor_needs_no_model(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def unreachable(index: int) -> str:
        raise AssertionError("the model is not needed when --floor is given")

    busbw(monkeypatch, 30.0)
    monkeypatch.setattr(cli, "nvml_device_name", unreachable)
    assert main(["allreduce", "--floor", "40"]) == 1
    assert capsys.readouterr().out.startswith("FAIL nccl-multinode")

"""``tests/hardware/run.sh`` where there is no GPU: it says in one line why it
cannot run, and its dry run on simulated GPUs leaves every file it promises."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "tests/hardware/run.sh"
FILES = {
    "machine.txt",
    "sweep.json",
    "check.json",
    "report.json",
    "probes.json",
    "table.txt",
    "figures.jsonl",
}


def nvml_library_loads() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


needs_no_driver = pytest.mark.skipif(
    shutil.which("nvidia-smi") is not None or nvml_library_loads(),
    reason="this machine has an NVIDIA driver",
)


def run_script(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHON": sys.executable, **env},
        cwd=ROOT,
    )


def fake_nvidia_smi(folder: Path) -> str:
    """An nvidia-smi that exists, for the paths past the driver check."""
    path = folder / "nvidia-smi"
    path.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-fake)'\n")
    path.chmod(0o755)
    return str(path)


@needs_no_driver
def test_without_a_driver_it_says_so_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_script(OUT=str(out))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "hardware check: no NVIDIA driver on this machine (no nvidia-smi, no "
        "libnvidia-ml.so.1); run this on a machine with NVIDIA GPUs"
    ]
    assert not out.exists()


def test_a_python_without_torch_is_named_with_what_it_lacks(tmp_path: Path) -> None:
    # A bare virtual environment: the test venv has torch (the framework hooks need it).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", tmp_path / "bare"], check=True)
    bare = str(tmp_path / "bare" / "bin" / "python")
    done = run_script(NVIDIA_SMI=fake_nvidia_smi(tmp_path), OUT=str(tmp_path / "out"), PYTHON=bare)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        f"hardware check: no Python here has what the check needs: {bare} lacks "
    )
    assert "nvidia-ml-py, torch (the active extra); install what is missing" in line
    assert line.endswith("or --skip-active to leave the probes out")


@needs_no_driver
def test_nvml_that_does_not_start_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    done = run_script(
        "--skip-active", NVIDIA_SMI=fake_nvidia_smi(tmp_path), OUT=str(tmp_path / "out")
    )
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"hardware check: NVML does not start with {sys.executable}: ")


def test_an_unknown_argument_is_refused() -> None:
    done = run_script("--sweep", "3")
    assert done.returncode == 2
    assert done.stderr == "hardware check: unknown argument '--sweep' (see --help)\n"


def test_a_dry_run_on_simulated_gpus_leaves_every_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_script("--sim", "H200", "--sweeps", "3", OUT=str(out))
    assert done.returncode == 0, done.stderr
    assert {p.name for p in out.iterdir()} == FILES
    (line,) = (out / "figures.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert (record["model"], record["sweeps"], record["missing"]) == ("H200", 3, [])
    assert record["figures"]["gemm"]["suite"].startswith("pass")
    assert "bf16 GEMM 8192^3" in done.stdout


def test_stages_that_fail_are_named_and_the_run_exits_1(tmp_path: Path) -> None:
    done = run_script("--sim", "B300", "--sweeps", "2", OUT=str(tmp_path / "out"))
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "hardware check: incomplete: sweep (exit 2); gpuhealth check (exit 1); "
        f"probes (exit 2); summary (exit 1); see {tmp_path / 'out'}"
    )
    assert "Traceback" not in done.stdout + done.stderr

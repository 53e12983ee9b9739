"""`pitcrew demo` end to end: a short seeded run on its own devcluster.

The README's main command must work on a fresh machine: it starts the
control plane, the simulated agents, the operator and a training job,
injects faults, prints a summary, and leaves nothing running.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pitcrew.dev import devcluster
from pitcrew.dev.demo.runner import STEPS_PER_SECOND


def test_a_short_demo_takes_faulty_nodes_out_and_cleans_up(tmp_path: Path) -> None:
    directory = tmp_path / "demo"
    shown = subprocess.run(
        [sys.executable, "-m", "pitcrew.cli", "demo", "--nodes", "8", "--spares", "1",
         "--duration", "40", "--speed", "6", "--seed", "7", "--dir", str(directory),
         "--straggler-at", "-1", "--hang-at", "-1"],
        capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stdout[-3000:] + shown.stderr[-3000:]
    summary = shown.stdout[shown.stdout.index("Pitcrew demo summary") :]
    assert "faults injected" in summary
    taken_out = next(line for line in summary.splitlines() if "took the node out" in line)
    injected = next(line for line in summary.splitlines() if "on nodes / job crashes" in line)
    on_nodes = int(injected.split("│")[2].split("/")[0])
    # Seed 7 puts six node faults in the 40 s, all of them fatal or degraded; the
    # breaker (25 % of 8 nodes) may rightly keep some in service.
    assert on_nodes == 6
    assert 1 <= int(taken_out.split("│")[2]) <= on_nodes
    assert "job goodput" in summary
    # The job's own count and Pitcrew's ledger agree: every restart is an interruption,
    # and the time wasted is the steps lost, within a second's steps and one step per
    # loss: the API stamps a pod's stop in whole seconds, the job counts whole steps
    # (a CI run measured 1.03 s a loss over four), and the demo's compressed steps are 0.5 s
    # (tests/e2e/operator/test_job_accounting.py holds the ledger to one step at
    # steps longer than that second). The counts may differ by one: two losses within
    # about a second (six faults in 40 s here) are one to whichever side did not see
    # every pod run in between: the job looks every 0.1 s, the ledger reads pod times
    # stamped in whole seconds. Such a merged loss wastes no extra steps, which the
    # step check holds.
    own = next(line for line in summary.splitlines() if "job: restarts" in line)
    restarts, lost = (float(x) for x in own.split("│")[2].split("/"))
    ledger = next(line for line in summary.splitlines() if "ledger: interruptions" in line)
    interruptions = int(ledger.split("│")[2].split("/")[0])
    ledger_steps = float(ledger.split("=")[1].split("steps")[0])
    assert abs(interruptions - restarts) <= 1, summary
    assert abs(ledger_steps - lost) <= max(1.0, restarts * (STEPS_PER_SECOND + 1)), summary
    assert (directory / "cluster" / "state.json").exists() is False
    assert devcluster.status(directory=directory / "cluster")["running"] is False


def test_the_demo_finds_a_straggler_no_check_sees_and_the_jobs_mfu_recovers(
    tmp_path: Path,
) -> None:
    """A slow-gemm GPU (no passive check fails) slows the synchronous job; its own
    step times name the node, Pitcrew takes it out at a checkpoint, the job resumes
    on the spare and its MFU, as the operator measures it, comes back."""
    directory = tmp_path / "demo"
    shown = subprocess.run(
        [sys.executable, "-m", "pitcrew.cli", "demo", "--nodes", "8", "--spares", "1",
         "--duration", "150", "--speed", "0.001", "--seed", "7", "--dir", str(directory),
         "--straggler-at", "30", "--hang-at", "-1"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stdout[-3000:] + shown.stderr[-3000:]
    summary = shown.stdout[shown.stdout.index("Pitcrew demo summary") :]
    injected = next(line for line in summary.splitlines() if "on nodes / job crashes" in line)
    assert injected.split("│")[2].split("/")[0].strip() == "1", summary  # the straggler only
    straggler = next(line for line in summary.splitlines() if "straggler (" in line)
    assert "taken out after" in straggler, summary
    mfu = next(line for line in summary.splitlines() if "MFU before / while" in line)
    before, during, after = (float(x.strip(" %")) for x in mfu.split("│")[2].split("/"))
    # A 1.5x slower rank: the job runs at two thirds of its pace until the node is out.
    assert during < 0.8 * before, summary
    assert after > 0.9 * before, summary


def test_the_demo_restarts_a_hung_job_long_before_the_watchdog(tmp_path: Path) -> None:
    """One rank stops for good, its pods running: the others wait. Pitcrew reads the
    ranks' heartbeats, quarantines the node of the rank that stopped first and restarts
    the job within two minutes of its last step (the NCCL watchdog: ten)."""
    directory = tmp_path / "demo"
    shown = subprocess.run(
        [sys.executable, "-m", "pitcrew.cli", "demo", "--nodes", "8", "--spares", "1",
         "--duration", "130", "--speed", "0.001", "--seed", "7", "--dir", str(directory),
         "--straggler-at", "-1", "--hang-at", "30"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stdout[-3000:] + shown.stderr[-3000:]
    summary = shown.stdout[shown.stdout.index("Pitcrew demo summary") :]
    hang = next(line for line in summary.splitlines() if "hang (rank" in line)
    restarted = float(hang.split("restarted after")[1].strip(" s│"))
    assert restarted < 120, summary
    out = next(line for line in summary.splitlines() if "NCCL watchdog" in line)
    assert out.split("│")[2].split("/")[0].strip() != "not taken out", summary

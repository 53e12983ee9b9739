"""The Slurm fixture is a real cluster: a batch job runs on the node it asks for,
and draining that node goes through DRAINING (job still running) to DRAINED
(job gone), and RESUME makes it IDLE again, as on a production cluster."""

from __future__ import annotations

import time
from collections.abc import Callable

from support.slurmcluster import SlurmCluster

NODE = "slurm-node-1"


def node_state(slurm: SlurmCluster, node: str) -> str:
    """The long state name sinfo prints: idle, allocated, draining, drained..."""
    return slurm.run("sinfo", "-h", "-N", "-n", node, "-o", "%T").strip()


def wait_until(what: str, check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_job_runs_on_its_node_and_the_node_drains_and_resumes(slurm: SlurmCluster) -> None:
    ran_on = slurm.directory / "ran-on"
    job = slurm.run(
        "sbatch", "--parsable", "-w", NODE, "--wrap", f"echo $SLURMD_NODENAME > {ran_on}; sleep 300"
    ).strip()
    wait_until(
        "the job to run",
        lambda: slurm.run("squeue", "-h", "-j", job, "-o", "%T|%N").strip() == f"RUNNING|{NODE}",
    )
    wait_until(
        "the job to write its node", lambda: ran_on.exists() and ran_on.read_text() == f"{NODE}\n"
    )
    assert node_state(slurm, NODE) == "allocated"

    slurm.run(
        "scontrol", "update", f"NodeName={NODE}", "State=DRAIN", "Reason=pitcrew: Xid 79 on GPU 3"
    )
    assert node_state(slurm, NODE) == "draining"
    shown = slurm.run("scontrol", "-o", "show", "node", NODE)
    assert "State=ALLOCATED+DRAIN " in shown
    assert "Reason=pitcrew: Xid 79 on GPU 3 [" in shown

    slurm.run("scancel", job)
    wait_until("the node to be drained", lambda: node_state(slurm, NODE) == "drained")
    slurm.run("scontrol", "update", f"NodeName={NODE}", "State=RESUME")
    # 22.05 marks a resumed node not responding (`idle*`) until its next ping, at once.
    wait_until("the node to be idle", lambda: node_state(slurm, NODE) == "idle")
    assert node_state(slurm, "slurm-node-0") == "idle"

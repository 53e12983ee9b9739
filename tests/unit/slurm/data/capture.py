"""Regenerate the Slurm output vectors in this folder from real daemons.

    PYTHONPATH=tests .venv/bin/python tests/unit/slurm/data/capture.py
    PYTHONPATH=tests .venv/bin/python tests/unit/slurm/data/capture.py trixie

The second form runs Debian trixie's Slurm 24.11 from its root file system (``make
slurm-trixie``; :class:`support.slurmcluster.SlurmCluster` with ``root``) and saves
what its ``scontrol --json show node`` (the path Pitcrew takes from 23.02 on) and
``scontrol -o show node`` print, as ``*-24.11-<state>.*``.

Starts a :class:`support.slurmcluster.SlurmCluster` (nodes slurm-node-0 and
slurm-node-1), walks slurm-node-0 through idle, allocated, draining, drained,
down and a drain whose reason has spaces and a colon, and saves what the
clients print in each state, byte for byte. slurm-node-1 is idle in every
node vector, so a parser of the JSON must pick its node out of two. See README.md.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from support.slurmcluster import TRIXIE_ROOT, SlurmCluster

DATA = Path(__file__).resolve().parent
NODE = "slurm-node-0"
OTHER = "slurm-node-1"
REASON = "pitcrew-maintenance"
REASON_WITH_SPACES = "pitcrew: Xid 79 on GPU 3"
TRIXIE = "24.11"
"""The Slurm release of Debian trixie, in the names of its vectors."""


def wait_until(what: str, check: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


def state(slurm: SlurmCluster) -> str:
    return slurm.run("scontrol", "-o", "show", "node", NODE).split(" State=")[1].split()[0]


def save(slurm: SlurmCluster, name: str) -> None:
    """The node's state as ``sinfo --json`` (22.05's scontrol has no --json), or as
    ``scontrol --json show node`` (later releases), and as ``scontrol -o``."""
    if slurm.root is None:
        (DATA / f"sinfo-json-{name}.json").write_text(slurm.run("sinfo", "--json"))
        (DATA / f"scontrol-show-node-{name}.txt").write_text(
            slurm.run("scontrol", "-o", "show", "node", NODE)
        )
        return
    (DATA / f"scontrol-json-{TRIXIE}-{name}.json").write_text(
        slurm.run("scontrol", "--json", "show", "node")
    )
    (DATA / f"scontrol-show-node-{TRIXIE}-{name}.txt").write_text(
        slurm.run("scontrol", "-o", "show", "node", NODE)
    )


def update(slurm: SlurmCluster, *fields: str) -> None:
    slurm.run("scontrol", "update", f"NodeName={NODE}", *fields)


def capture(slurm: SlurmCluster) -> None:
    version = "scontrol-version.txt" if slurm.root is None else f"scontrol-version-{TRIXIE}.txt"
    (DATA / version).write_text(slurm.run("scontrol", "--version"))
    save(slurm, "idle")

    job = slurm.run(
        "sbatch", "--parsable", "-J", "pitcrew-train", "-w", NODE, "--wrap", "sleep 300"
    )
    job = job.strip()
    wait_until("the job to run", lambda: state(slurm) == "ALLOCATED")
    save(slurm, "allocated")
    capture_queue(slurm)

    update(slurm, "State=DRAIN", f"Reason={REASON}")
    save(slurm, "draining")
    slurm.run("scancel", job)
    wait_until("the node to be drained", lambda: state(slurm) == "IDLE+DRAIN")
    save(slurm, "drained")

    resume(slurm)
    update(slurm, "State=DOWN", f"Reason={REASON}")
    save(slurm, "down")

    resume(slurm)
    update(slurm, "State=DRAIN", f"Reason={REASON_WITH_SPACES}")
    save(slurm, "reason-with-spaces")


def capture_queue(slurm: SlurmCluster) -> None:
    """The queue with one job on NODE and, briefly, one on OTHER: 22.05's
    ``squeue --json`` ignores ``-w`` and lists both, the text output only NODE's. For
    24.11, what the operator runs (:meth:`pitcrew.slurm.control.Slurm.jobs`)."""
    if slurm.root is not None:
        slurm.run("scontrol", "update", "JobId=1", 'Comment={"step":7}')
        argv = ["squeue", "-h", "-w", NODE, "-t", "RUNNING,COMPLETING", "-o", "%i|%k"]
        (DATA / f"squeue-{TRIXIE}-running.txt").write_text(slurm.run(*argv))
        return
    other = slurm.run("sbatch", "--parsable", "-J", "other-job", "-w", OTHER, "--wrap", "sleep 300")
    running = f"{other.strip()}|RUNNING"
    wait_until(
        "the other job to run", lambda: slurm.run("squeue", "-h", "-o", "%i|%T").count(running) == 1
    )
    (DATA / "squeue-json-running.json").write_text(slurm.run("squeue", "--json", "-w", NODE))
    (DATA / "squeue-running.txt").write_text(
        slurm.run("squeue", "-h", "-w", NODE, "-o", "%i|%T|%j|%u")
    )
    slurm.run("scancel", other.strip())
    wait_until("the other node to be idle", lambda: not slurm.run("squeue", "-h", "-w", OTHER))


def resume(slurm: SlurmCluster) -> None:
    update(slurm, "State=RESUME")
    # A resumed node is IDLE+NOT_RESPONDING until slurmctld pings it.
    wait_until("the node to be idle", lambda: state(slurm) == "IDLE")


def capture_restart(slurm: SlurmCluster) -> None:
    """A drained node whose job runs on, just after slurmctld restarts: for a few
    seconds, before the node's slurmd registers again, its state is UNKNOWN (with its
    flags: UNKNOWN+DRAIN), whatever runs there."""
    slurm.run("sbatch", "--parsable", "-w", NODE, "--wrap", "sleep 300")
    wait_until("the job to run", lambda: state(slurm) == "ALLOCATED")
    update(slurm, "State=DRAIN", f"Reason={REASON_WITH_SPACES}")
    slurm.stop_controller()
    slurm.start_controller()

    def unknown() -> bool:
        try:
            return state(slurm).startswith("UNKNOWN")
        except RuntimeError:  # slurmctld not answering yet
            return False

    wait_until("the node UNKNOWN after the restart", unknown, timeout=30)
    save(slurm, "restarted")


def main() -> None:
    """``capture.py [trixie] [restarted]``: every vector of 22.05 (or 24.11), or only
    the one of a node just after slurmctld restarts."""
    root = TRIXIE_ROOT if "trixie" in sys.argv[1:] else None
    walk = capture_restart if "restarted" in sys.argv[1:] else capture
    directory = Path(tempfile.mkdtemp(prefix="pitcrew-slurm-vectors-"))
    try:
        with SlurmCluster(directory, [NODE, OTHER], root=root) as slurm:
            walk(slurm)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()

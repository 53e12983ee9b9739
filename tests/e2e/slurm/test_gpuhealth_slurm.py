"""``gpuhealth slurm`` against real Slurm daemons: as the HealthCheckProgram an admin
runs on each node, and as the prolog slurmd runs before each job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.fleet import eventually
from support.slurmcluster import SlurmCluster, binary, missing_binaries

GPUHEALTH = str(Path(sys.executable).parent / "gpuhealth")
FALLEN_OFF = [{"type": "xid", "gpu": 2, "code": 79}]
NODES = ["hc-node-0", "hc-node-1"]


def check(slurm: SlurmCluster, mode: str, node: str, faults: Path | None) -> int:
    argv = [GPUHEALTH, "slurm", mode, "--backend", "sim", "--noise", "0", "--node-name", node]
    argv += ["--scontrol", binary("scontrol"), "--rate-window", "0"]
    argv += ["--scenario", str(faults)] if faults else []
    return subprocess.run(argv, env=slurm.env, capture_output=True, check=False).returncode


def state_of(slurm: SlurmCluster, node: str) -> tuple[str, str]:
    shown = slurm.run("scontrol", "-o", "show", "node", node)
    found = shown.split("State=", 1)[1].split()[0]
    reason = shown.split(" Reason=", 1)[1].rsplit(" [", 1)[0] if " Reason=" in shown else ""
    return found, reason


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("faults") / "xid79.json"
    path.write_text(json.dumps(FALLEN_OFF))
    return path


@pytest.fixture(scope="module")
def prolog_slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """Slurm with gpuhealth as its prolog; a node's faults are the file
    ``faults-<node>.json`` in the cluster's folder, when there is one."""
    if missing_binaries():
        if os.environ.get("CI"):
            pytest.fail(f"Slurm is not installed (no {', '.join(missing_binaries())})")
        pytest.skip("Slurm is not installed: run `make slurm`")
    directory = tmp_path_factory.mktemp("prolog")
    script = directory / "prolog.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"export SLURM_CONF={directory / 'slurm.conf'}\n"
        f'faults="{directory}/faults-$SLURMD_NODENAME.json"\n'
        f"set -- --backend sim --noise 0 --rate-window 0 --scontrol {binary('scontrol')}\n"
        '[ -f "$faults" ] && set -- "$@" --scenario "$faults"\n'
        f'exec {GPUHEALTH} slurm prolog "$@"\n'
    )
    script.chmod(0o755)
    with SlurmCluster(directory, NODES, extra=[f"Prolog={script}"]) as cluster:
        yield cluster


def test_the_health_check_drains_with_the_finding_and_resumes_only_its_own_drain(
    slurm: SlurmCluster, faults: Path
) -> None:
    node, other = slurm.nodes
    assert check(slurm, "healthcheck", node, faults) == 1
    found, reason = state_of(slurm, node)
    assert "DRAIN" in found
    assert reason.startswith("gpuhealth: xid gpu2: "), reason

    assert check(slurm, "healthcheck", node, None) == 0  # the fault cleared
    assert "DRAIN" not in state_of(slurm, node)[0]

    person = "replace PSU, ticket 88"
    slurm.run("scontrol", "update", f"NodeName={other}", "State=DRAIN", f"Reason={person}")
    assert check(slurm, "healthcheck", other, None) == 0
    assert state_of(slurm, other) == ("IDLE+DRAIN", person)
    slurm.run("scontrol", "update", f"NodeName={other}", "State=RESUME")


@pytest.mark.parametrize(
    ("state", "reason"),
    [("DRAIN", "replace PSU, ticket 88"), ("DOWN", "bad cable, ticket 17")],
)
def test_a_node_out_for_someone_elses_reason_is_never_drained_over_or_resumed(
    slurm: SlurmCluster, faults: Path, state: str, reason: str
) -> None:
    """Slurm replaces a drain's reason: drained over, the person's drain would become
    gpuhealth's, and the next passing check would resume it."""
    node = slurm.nodes[1]
    # A node just resumed is IDLE+NOT_RESPONDING until slurmctld pings it; set DOWN then,
    # ReturnToService=2 brings it back at that ping, under the check's feet.
    eventually(lambda: state_of(slurm, node)[0] == "IDLE", timeout=30, what=f"{node} idle")
    slurm.run("scontrol", "update", f"NodeName={node}", f"State={state}", f"Reason={reason}")
    before = state_of(slurm, node)
    try:
        assert check(slurm, "healthcheck", node, faults) == 1  # still a failure
        assert state_of(slurm, node) == before
        assert check(slurm, "healthcheck", node, None) == 0
        assert state_of(slurm, node) == before
        assert before[1] == reason
    finally:
        slurm.run("scontrol", "update", f"NodeName={node}", "State=RESUME")


def test_a_failing_prolog_keeps_the_job_off_the_broken_node(prolog_slurm: SlurmCluster) -> None:
    broken, healthy = prolog_slurm.nodes
    (prolog_slurm.directory / f"faults-{broken}.json").write_text(json.dumps(FALLEN_OFF))
    job = prolog_slurm.run(
        "sbatch", "--parsable", "-w", broken, "--wrap", "echo ran on $SLURMD_NODENAME"
    ).strip()
    found, reason = eventually(
        lambda: (found := state_of(prolog_slurm, broken)) and "DRAIN" in found[0] and found,
        timeout=60,
        what=f"{broken} drained by its prolog",
    )
    assert reason.startswith("gpuhealth: xid gpu2: XID 79"), (found, reason)
    # The job never ran there: Slurm requeued it (held, as Slurm does after a failed
    # launch) instead of running it on the broken GPU. The prolog drains the node
    # before it exits, so for a moment the node is drained while slurmctld has not yet
    # heard that the prolog failed and still shows the job as launching (RUNNING).
    shown = eventually(
        lambda: (
            "JobState=PENDING" in (found := prolog_slurm.run("scontrol", "-o", "show", "job", job))
            and found
        ),
        timeout=60,
        what=f"job {job} requeued after its prolog failed",
    )
    assert "Restarts=1" in shown, shown
    output = prolog_slurm.directory / f"slurm-{job}.out"
    assert not output.exists() or "ran on" not in output.read_text()
    # A healthy node's prolog passes and its jobs run.
    ran = prolog_slurm.run("sbatch", "--parsable", "-w", healthy, "--wrap", "true").strip()
    eventually(
        lambda: "JobState=COMPLETED" in prolog_slurm.run("scontrol", "-o", "show", "job", ran),
        timeout=60,
        what="a job on the healthy node",
    )

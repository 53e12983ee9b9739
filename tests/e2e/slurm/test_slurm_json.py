"""The path every Slurm from 23.02 on takes, against a real slurmctld of that generation:
Debian trixie's Slurm 24.11 (slurmctld, two slurmd, munged) from its own root file
system (``make slurm-trixie``), driven through Pitcrew's own client
(:class:`pitcrew.slurm.control.Slurm`: ``scontrol --json show node``, ``squeue``,
``scontrol update``), the operator's watch and ``gpuhealth slurm``. No Kubernetes
here: what is Slurm's is tested on Slurm; the lifecycle over it is tested on Debian's
22.05 in test_slurm_drain.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuhealth.slurm import parse_node_line
from pitcrew.api.policy import SlurmSpec
from pitcrew.controller.slurm import SlurmWatch
from pitcrew.core.views import SlurmNodeView, SlurmUnreadable
from pitcrew.slurm.control import Slurm, SlurmError
from support.fleet import eventually
from support.slurmcluster import TRIXIE_ROOT, SlurmCluster, missing_binaries

GPUHEALTH = str(Path(sys.executable).parent / "gpuhealth")
NODES = ["json-node-0", "json-node-1"]
REASON = "pitcrew: Xid 79 on GPU 3"


@pytest.fixture(scope="module")
def trixie(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """Slurm 24.11 in a chroot. Without root (a chroot and a mount namespace need it)
    the tests are skipped, in CI too; without the root file system they fail in CI
    (``make test`` makes it) and are skipped elsewhere."""
    if os.geteuid() != 0:
        pytest.skip("Slurm 24.11 runs in a chroot, which needs root")
    missing = missing_binaries(TRIXIE_ROOT) if TRIXIE_ROOT.is_dir() else ["everything"]
    if missing:
        reason = f"no Slurm 24.11 in {TRIXIE_ROOT} ({', '.join(missing)}): run `make slurm-trixie`"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    with SlurmCluster(tmp_path_factory.mktemp("trixie"), NODES, root=TRIXIE_ROOT) as cluster:
        yield cluster


@pytest.fixture
def slurm(trixie: SlurmCluster) -> Slurm:
    """Pitcrew's client on the root's tools, as the operator runs them."""
    assert trixie.tools is not None
    client = Slurm.beside(str(trixie.tools / "scontrol"), env={"SLURM_CONF": str(trixie.conf)})
    assert "24.11" in trixie.run("scontrol", "--version")
    return client


def node(slurm: Slurm, name: str) -> SlurmNodeView:
    read = slurm.nodes()
    assert read.problems == ()
    return read.items[name]


def test_scontrol_json_is_the_path_and_reads_every_state(
    slurm: Slurm, trixie: SlurmCluster
) -> None:
    name = NODES[0]
    assert node(slurm, name).states == ("IDLE",)
    assert slurm.scontrol_json  # 24.11 answered --json: no fallback to sinfo

    job = trixie.run("sbatch", "--parsable", "-w", name, "--wrap", "sleep 300").strip()
    eventually(lambda: node(slurm, name).busy, timeout=30, what=f"job {job} running")
    assert node(slurm, name).states == ("ALLOCATED",)
    slurm.comment(job, '{"step":7}')
    assert slurm.jobs(name).items == ((job, '{"step":7}'),)

    slurm.update(name, "DRAIN", REASON)
    draining = node(slurm, name)
    assert draining.states == ("ALLOCATED", "DRAIN")
    assert (draining.busy, draining.drained, draining.pitcrews) == (True, True, True)
    assert draining.reason == REASON

    trixie.run("scancel", job)
    drained = eventually(
        lambda: (found := node(slurm, name)) and not found.busy and found,
        timeout=30,
        what="the drained node idle",
    )
    assert drained.states == ("IDLE", "DRAIN")

    slurm.update(name, "DOWN", REASON)
    assert "DOWN" in node(slurm, name).states
    slurm.update(name, "RESUME")
    resumed = eventually(
        lambda: (found := node(slurm, name)) and not found.out and found,
        timeout=30,
        what="the node resumed",
    )
    # 24.11 keeps the reason of a DOWN node after RESUME (22.05 clears it): a reason
    # alone never says the node is Pitcrew's to resume, only a reason on a node out.
    assert resumed.reason in ("", REASON)
    assert not resumed.pitcrews


def test_the_watch_reads_slurm_24_11_and_loses_it_when_slurmctld_stops(
    slurm: Slurm, trixie: SlurmCluster
) -> None:
    """The operator's watch on the real client: a node's view, then a slurmctld that
    stops answering is an unreadable node (never "no Slurm node"), then back."""
    watch = SlurmWatch(slurm, interval=1, wake=lambda _: None)
    watch.poll()
    view, _ = watch.view(NODES[1], [], SlurmSpec(), taking_out=False)
    assert isinstance(view, SlurmNodeView)
    assert view.states == ("IDLE",)
    trixie.stop_controller()
    try:
        slurm.timeout = 5
        watch.stale_after = 1
        with pytest.raises(SlurmError):
            watch.poll()
        time.sleep(1.5)
        view, _ = watch.view(NODES[1], [], SlurmSpec(), taking_out=False)
        assert isinstance(view, SlurmUnreadable)
        assert view.name == NODES[1]
    finally:
        trixie.start_controller()

    def read_again() -> bool:
        with contextlib.suppress(SlurmError):  # slurmctld still starting
            watch.poll()
        return isinstance(watch.view(NODES[1], [], SlurmSpec(), taking_out=False)[0], SlurmNodeView)

    eventually(read_again, timeout=60, what="Slurm read again")


def test_gpuhealth_on_slurm_24_11_drains_its_own_and_never_a_persons(
    trixie: SlurmCluster, tmp_path: Path
) -> None:
    assert trixie.tools is not None
    faults = tmp_path / "xid79.json"
    faults.write_text(json.dumps([{"type": "xid", "gpu": 2, "code": 79}]))
    mine, theirs = NODES

    def check(node: str, scenario: Path | None) -> int:
        argv = [GPUHEALTH, "slurm", "healthcheck", "--backend", "sim", "--noise", "0"]
        argv += ["--node-name", node, "--scontrol", str(trixie.tools / "scontrol")]
        argv += ["--rate-window", "0", *(["--scenario", str(scenario)] if scenario else [])]
        return subprocess.run(argv, env=trixie.env, capture_output=True, check=False).returncode

    def shown(node: str) -> tuple[str, str]:
        line = trixie.run("scontrol", "-o", "show", "node", node)
        return parse_node_line(line)

    eventually(lambda: shown(mine)[0] == "IDLE", timeout=30, what=f"{mine} idle")
    assert check(mine, faults) == 1
    assert shown(mine)[0] == "IDLE+DRAIN"
    assert shown(mine)[1].startswith("gpuhealth: xid gpu2: ")
    assert check(mine, None) == 0
    assert "DRAIN" not in shown(mine)[0]

    eventually(lambda: shown(theirs)[0] == "IDLE", timeout=30, what=f"{theirs} idle")
    person = "replace PSU, ticket 88"
    trixie.run("scontrol", "update", f"NodeName={theirs}", "State=DRAIN", f"Reason={person}")
    assert check(theirs, faults) == 1
    assert shown(theirs) == ("IDLE+DRAIN", person)
    assert check(theirs, None) == 0
    assert shown(theirs) == ("IDLE+DRAIN", person)
    trixie.run("scontrol", "update", f"NodeName={theirs}", "State=RESUME")

"""Pitcrew drains through real Slurm (slurmctld, two slurmd, munged): the Slinky
layout, a slurmd pod on each Kubernetes node naming its Slurm node by label.

The operator reads Slurm with ``scontrol``/``sinfo``/``squeue`` and changes it with
``scontrol update``, as it would in a cluster; the Kubernetes nodes are kwok's, the
Slurm nodes are real daemons on this machine running real batch jobs.
"""

from __future__ import annotations

import datetime
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from pitcrew.dev.stack import SimStack
from support.fleet import GROUP, NAMESPACE, VERSION, Fleet, eventually
from support.slurmcluster import HANG_EPILOG, SlurmCluster, binary

FATAL_XID = [{"type": "xid", "gpu": 2, "code": 79}]
LABEL = "slinky.slurm.net/pod-hostname"
SLURM_NAMESPACE = "slurm"


@pytest.fixture
def slurm_operator(pitcrew: SimStack, slurm: SlurmCluster) -> Iterator[None]:
    """The session's operators (the leader and any standby an earlier test left)
    replaced by one with Slurm's client, for these tests."""
    stopped = [name for name in pitcrew.running if name.startswith("operator")]
    for name in stopped:
        pitcrew.kill(name)
    pitcrew.start_operator(
        "operator-slurm",
        extra=["--slurm-scontrol", binary("scontrol"), "--slurm-seconds", "2"],
        env={"SLURM_CONF": slurm.env["SLURM_CONF"]},
    )
    yield
    pitcrew.kill("operator-slurm")
    for name in stopped:
        pitcrew.start_operator(name)


@pytest.fixture
def slurm_fleet(
    fleet_factory: type[Fleet], core: client.CoreV1Api, slurm: SlurmCluster, slurm_operator: None
) -> Iterator[Fleet]:
    """Two kwok nodes, each with a slurmd pod (as Slinky's NodeSet makes them) naming
    one of the real Slurm nodes, under a policy that drains through Slurm."""
    fleet = fleet_factory(size=2)
    try:
        core.create_namespace({"metadata": {"name": SLURM_NAMESPACE}})
    except client.ApiException as error:
        if error.status != 409:
            raise
    pods = [f"{fleet.group}-{slurm_node}" for slurm_node in slurm.nodes]
    for node, slurm_node, pod in zip(fleet.nodes, slurm.nodes, pods, strict=True):
        core.create_namespaced_pod(
            SLURM_NAMESPACE,
            {
                "metadata": {"name": pod, "labels": {LABEL: slurm_node}},
                "spec": {
                    "nodeName": node,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "slurmd", "image": "ghcr.io/slinkyproject/slurmd"}],
                },
            },
        )
    fleet.policy(
        slurm={"enabled": True},
        safety={"maxUnhealthy": "100%", "drain": {"timeout": "10m"}},
    )
    for node in fleet.nodes:
        fleet.wait_phase(node, "Healthy", timeout=90)
    yield fleet
    for pod in pods:
        try:
            core.delete_namespaced_pod(pod, SLURM_NAMESPACE, grace_period_seconds=0)
        except client.ApiException as error:
            if error.status != 404:  # gone with its node
                raise
    for slurm_node in slurm.nodes:
        slurm.run("scancel", "-w", slurm_node)
        if {"DRAIN", "DOWN"} & set(slurm_state(slurm, slurm_node)[0].split("+")):
            slurm.run("scontrol", "update", f"NodeName={slurm_node}", "State=RESUME")


def slurm_state(slurm: SlurmCluster, node: str) -> tuple[str, str]:
    """``State=`` and ``Reason=`` of ``scontrol show node`` (the reason is last)."""
    shown = slurm.run("scontrol", "-o", "show", "node", node)
    state = shown.split("State=", 1)[1].split()[0]
    reason = shown.split("Reason=", 1)[1].rsplit(" [", 1)[0] if "Reason=" in shown else ""
    return state, reason


def job_state(slurm: SlurmCluster, job: str) -> str:
    return slurm.run("squeue", "-h", "-j", job, "-o", "%T").strip() or "GONE"


def reset_jobs(batch: client.BatchV1Api, node: str) -> list[client.V1Job]:
    return [
        j
        for j in batch.list_namespaced_job(
            NAMESPACE, label_selector=f"pitcrew.dev/node={node}"
        ).items
        if j.metadata.name.startswith("pitcrew-fix-")
    ]


def test_a_slurm_job_on_a_failing_node_ends_under_slurms_drain_before_the_reset(
    slurm_fleet: Fleet, slurm: SlurmCluster, api_client: client.ApiClient
) -> None:
    fleet, node, slurm_node = slurm_fleet, slurm_fleet.nodes[0], slurm.nodes[0]
    batch = client.BatchV1Api(api_client)
    job = slurm.run("sbatch", "--parsable", "-w", slurm_node, "--wrap", "sleep 30").strip()
    eventually(lambda: job_state(slurm, job) == "RUNNING", timeout=30, what=f"job {job} running")

    fleet.inject(node, FATAL_XID)
    # Slurm drains the node with Pitcrew's reason while the job runs on.
    _, reason = eventually(
        lambda: (found := slurm_state(slurm, slurm_node)) and "DRAIN" in found[0] and found,
        timeout=60,
        what=f"{slurm_node} drained in Slurm",
    )
    assert reason.startswith("pitcrew: "), reason
    assert job_state(slurm, job) == "RUNNING"
    status = fleet.wait_phase(node, "Draining", timeout=30)["status"]
    assert any(p.startswith("slurm/") for p in status["drain"]["pending"]), status["drain"]
    assert status["slurm"]["drainedBy"] == "pitcrew"
    # No reset while Slurm's job runs: the drain waits for it as for a pod.
    while job_state(slurm, job) == "RUNNING":
        assert not reset_jobs(batch, node), "reset started while the Slurm job ran"
        time.sleep(1)
    ended = datetime.datetime.now(datetime.UTC)
    (reset,) = eventually(lambda: reset_jobs(batch, node), timeout=60, what="the reset Job")
    assert reset.metadata.creation_timestamp >= ended - datetime.timedelta(seconds=3)

    # Repaired, validated, back in service: resumed in Slurm, which runs jobs there again.
    fleet.wait_phase(node, "Healthy", timeout=180)
    eventually(
        lambda: "DRAIN" not in slurm_state(slurm, slurm_node)[0],
        timeout=30,
        what=f"{slurm_node} resumed",
    )
    again = slurm.run("sbatch", "--parsable", "-w", slurm_node, "--wrap", "true").strip()
    eventually(lambda: job_state(slurm, again) == "GONE", timeout=60, what="a job runs there again")
    assert "SlurmDrained" in fleet.wait_events(node, "SlurmDrained", "SlurmResumed")


def test_a_node_a_person_drained_stays_drained_through_pitcrews_repair(
    slurm_fleet: Fleet, slurm: SlurmCluster
) -> None:
    fleet, node, slurm_node = slurm_fleet, slurm_fleet.nodes[1], slurm.nodes[1]
    person = "swap the NIC, ticket 4411"
    slurm.run("scontrol", "update", f"NodeName={slurm_node}", "State=DRAIN", f"Reason={person}")
    eventually(
        lambda: (
            (fleet.gpunode(node).get("status") or {}).get("slurm", {}).get("drainedBy") == "other"
        ),
        timeout=30,
        what="the person's drain in GPUNode status",
    )

    fleet.inject(node, FATAL_XID)
    fleet.wait_phase(node, "Remediating", "Validating", timeout=60)
    fleet.wait_phase(node, "Healthy", timeout=180)
    time.sleep(5)  # a few Slurm polls after the node is back in service
    state, reason = slurm_state(slurm, slurm_node)
    assert "DRAIN" in state
    assert reason == person
    status = fleet.gpunode(node)["status"]["slurm"]
    assert (status["drainedBy"], status["reason"]) == ("other", person)


NVLINK_DOWN = [{"type": "nvlink-down", "gpu": 2, "link": 3}]
TRAINER = """
import pathlib, sys, time
from pitcrew.client.progress import ProgressReporter
reporter = ProgressReporter(min_interval=0)
reporter.step(10)
flag = pathlib.Path(sys.argv[1])
while not flag.exists():
    time.sleep(0.5)
reporter.checkpoint(100)
time.sleep(600)
"""


def test_a_suspect_nodes_drain_waits_for_its_slurm_jobs_checkpoint(
    slurm_fleet: Fleet, slurm: SlurmCluster, tmp_path: Path
) -> None:
    """The job's rank 0 reports through the client, which under Slurm writes the job's
    comment; the drain begins at the checkpoint it reports, not before."""
    fleet, node, slurm_node = slurm_fleet, slurm_fleet.nodes[0], slurm.nodes[0]
    script, flag = tmp_path / "trainer.py", tmp_path / "checkpoint-now"
    script.write_text(TRAINER)
    job = slurm.run(
        "sbatch", "--parsable", "-w", slurm_node, "--wrap", f"{sys.executable} {script} {flag}"
    ).strip()
    eventually(lambda: job_state(slurm, job) == "RUNNING", timeout=30, what=f"job {job} running")
    eventually(
        lambda: '"step":10,' in slurm.run("squeue", "-h", "-j", job, "-o", "%k"),
        timeout=30,
        what="the job's first report in its comment",
    )

    fleet.inject(node, NVLINK_DOWN)
    fleet.wait_phase(node, "Suspect", timeout=30)
    eventually(
        lambda: "DRAIN" in slurm_state(slurm, slurm_node)[0], timeout=30, what="drained in Slurm"
    )
    time.sleep(6)  # three Slurm polls: no checkpoint yet, so no drain
    assert fleet.phase(node) == "Suspect"
    assert job_state(slurm, job) == "RUNNING"

    flag.touch()
    fleet.wait_phase(node, "Draining", timeout=30)
    assert job_state(slurm, job) == "RUNNING"  # Slurm's drain: the job ends on its own
    slurm.run("scancel", job)
    fleet.wait_phase(node, "Healthy", timeout=180)


def test_a_drain_waits_for_a_slurm_it_cannot_read(
    slurm_fleet: Fleet, slurm: SlurmCluster, api_client: client.ApiClient
) -> None:
    """slurmctld stops mid-drain while a job runs: Slurm's state is unknown, not absent.
    The drain waits (no reset under the job), the node says why, and goes on once
    Slurm answers again."""
    fleet, node, slurm_node = slurm_fleet, slurm_fleet.nodes[0], slurm.nodes[0]
    batch = client.BatchV1Api(api_client)
    job = slurm.run("sbatch", "--parsable", "-w", slurm_node, "--wrap", "sleep 600").strip()
    eventually(lambda: job_state(slurm, job) == "RUNNING", timeout=30, what=f"job {job} running")
    fleet.inject(node, FATAL_XID)
    fleet.wait_phase(node, "Draining", timeout=60)
    eventually(
        lambda: "DRAIN" in slurm_state(slurm, slurm_node)[0], timeout=30, what="drained in Slurm"
    )
    slurm.stop_controller()
    try:
        status = eventually(
            lambda: (
                (found := fleet.gpunode(node)["status"])
                and "(not readable)" in " ".join(found["drain"]["pending"])
                and found
            ),
            timeout=150,
            what="the drain waiting for a Slurm it cannot read",
        )
        assert status["phase"] == "Draining"
        (readable,) = [c for c in status["conditions"] if c["type"] == "SlurmReadable"]
        assert (readable["status"], readable["reason"]) == ("False", "SlurmUnreadable")
        time.sleep(10)  # more decisions without a view of Slurm
        assert not reset_jobs(batch, node), "reset started while Slurm could not be read"
        assert fleet.phase(node) == "Draining"
    finally:
        slurm.start_controller()
    eventually(lambda: answers(slurm), timeout=60, what="slurmctld back")
    assert job_state(slurm, job) == "RUNNING"  # the job ran on all along
    # Just after it starts, slurmctld shows the node UNKNOWN+DRAIN while the job runs on
    # (tests/unit/slurm/data/*restarted*): not idle, so still no reset.
    eventually(
        lambda: (
            not any("(not readable)" in p for p in pending(fleet, node))
            and any(p.startswith("slurm/") for p in pending(fleet, node))
        ),
        timeout=60,
        what="Slurm read again",
    )
    time.sleep(5)
    assert fleet.phase(node) == "Draining"
    assert not reset_jobs(batch, node)
    slurm.run("scancel", job)
    eventually(lambda: reset_jobs(batch, node), timeout=60, what="the reset Job")
    fleet.wait_phase(node, "Healthy", timeout=180)


def test_a_job_stuck_completing_ends_with_the_forced_down_and_the_rung_starts(
    slurm_fleet: Fleet, slurm: SlurmCluster, api_client: client.ApiClient
) -> None:
    """onTimeout force on a job that stays COMPLETING (its epilog hangs): at the drain
    timeout the Slurm node goes DOWN, and Slurm (22.05, and 24.11 alike) ends the
    COMPLETING job with it, so the drain ends and the rung starts. A node Slurm still
    shows busy after its DOWN is remediated anyway after slurm.downGrace
    (tests/unit/slurm/test_slurm_lifecycle.py): this Slurm never left one so."""
    fleet, node, slurm_node = slurm_fleet, slurm_fleet.nodes[1], slurm.nodes[1]
    batch = client.BatchV1Api(api_client)
    fleet.custom.patch_cluster_custom_object(
        GROUP,
        VERSION,
        "gpuhealthpolicies",
        fleet.group,
        {
            "spec": {
                "slurm": {"downGrace": "20s"},
                "safety": {"drain": {"timeout": "15s", "onTimeout": "force"}},
            }
        },
    )
    hang = slurm.directory / HANG_EPILOG
    hang.touch()
    try:
        job = slurm.run("sbatch", "--parsable", "-w", slurm_node, "--wrap", "true").strip()
        eventually(
            lambda: "COMPLETING" in slurm_state(slurm, slurm_node)[0],
            timeout=30,
            what=f"job {job} stuck COMPLETING",
        )
        fleet.inject(node, FATAL_XID)
        fleet.wait_phase(node, "Draining", timeout=60)
        down = eventually(
            lambda: (state := slurm_state(slurm, slurm_node)[0]) and "DOWN" in state and state,
            timeout=60,
            what=f"{slurm_node} DOWN at the drain timeout",
        )
        assert "COMPLETING" not in down, down
        assert job_state(slurm, job) == "GONE"
        eventually(lambda: reset_jobs(batch, node), timeout=60, what="the reset Job")
    finally:
        hang.unlink(missing_ok=True)
    fleet.wait_phase(node, "Healthy", timeout=180)


def pending(fleet: Fleet, node: str) -> list[str]:
    return list(((fleet.gpunode(node).get("status") or {}).get("drain") or {}).get("pending", []))


def answers(slurm: SlurmCluster) -> bool:
    try:
        slurm.run("scontrol", "ping")
    except RuntimeError:
        return False
    return True

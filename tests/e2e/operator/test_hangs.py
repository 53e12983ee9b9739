"""Hung training jobs caught before the NCCL watchdog, on a real apiserver.

Two ranks of a JobSet's job write their own pods' heartbeats with the framework hook
and each pod's own credentials. When rank 1's process freezes (SIGSTOP, as with a GPU
driver stuck in the kernel), rank 0 waits in its next all-reduce and goes on
reporting: the job's pods run, nothing crashes, no rank steps. Pitcrew quarantines
the node of the rank that stopped reporting first with reason ``Hang`` and deletes
the job's pods (its launcher would start them again) within two minutes of the last
step, where the watchdog's default is ten. A checkpoint that pauses the job longer than its stall
bound, announced by the hook, is no hang."""

from __future__ import annotations

import datetime
import time
from pathlib import Path

from kubernetes import client

from pitcrew.api.vocabulary import HEARTBEAT_ANNOTATION
from pitcrew.client.progress import parse_heartbeat
from pitcrew.core.hangs import Heartbeat
from pitcrew.dev.stack import SimStack
from support.fixtures import HealthyFleet
from support.fleet import eventually
from support.launchers import jobset
from support.trainers import Trainer, pod_credentials, train

BOUND = datetime.timedelta(minutes=2)
"""From the job's last step to its pods deleted: what the issue asks for."""


def heartbeat(api: client.ApiClient, namespace: str, pod: str) -> Heartbeat | None:
    try:
        found = client.CoreV1Api(api).read_namespaced_pod(pod, namespace)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    text = (found.metadata.annotations or {}).get(HEARTBEAT_ANNOTATION)
    return parse_heartbeat(text) if text else None


def deleted(api: client.ApiClient, namespace: str, pod: str) -> datetime.datetime | None:
    """When the pod's deletion was asked for (now, if it is gone already), else None."""
    try:
        found = client.CoreV1Api(api).read_namespaced_pod(pod, namespace)
    except client.ApiException as error:
        if error.status == 404:
            return datetime.datetime.now(datetime.UTC)
        raise
    return found.metadata.deletion_timestamp


def watch_until_deleted(
    api: client.ApiClient, namespace: str, pods: list[str]
) -> tuple[datetime.datetime, datetime.datetime]:
    """The job's last step (the latest heartbeat of any pod, read while they exist) and
    when the last of its pods was deleted."""
    last = datetime.datetime.min.replace(tzinfo=datetime.UTC)
    deadline = time.monotonic() + BOUND.total_seconds() + 60
    while time.monotonic() < deadline:
        gone = [deleted(api, namespace, p) for p in pods]
        if all(gone):
            return last, max(t for t in gone if t is not None)
        beats = [
            b
            for p in pods
            if not deleted(api, namespace, p) and (b := heartbeat(api, namespace, p))
        ]
        last = max([last, *(b.time for b in beats)])
        time.sleep(0.5)
    raise AssertionError(f"the hung job's pods were not deleted (last step {last})")


def two_ranks(
    api: client.ApiClient,
    namespace: str,
    pods: list[str],
    nodes: list[str],
    folder: Path,
    *plan: str,
) -> Trainer:
    """The job's two ranks, each with its own pod's credentials and name."""
    configs = [pod_credentials(api, namespace, pod, folder) for pod in pods]
    return train(
        configs[0], namespace, pods[0], nodes[0], "hang", "100000", *plan,
        RANK_PODS=",".join(pods), RANK_NODES=",".join(nodes), RANK_KUBECONFIGS=",".join(configs),
    )  # fmt: skip


def test_a_job_whose_rank_stops_has_that_node_quarantined_and_its_pods_restarted_in_2_minutes(
    healthy_fleet: HealthyFleet,
    pitcrew: SimStack,
    api_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    fleet = healthy_fleet(size=3)  # the default hang policy: 10 step times, at least 60 s
    nodes = fleet.nodes[:2]
    pods = jobset(api_client, fleet, namespace, "hangs", nodes)
    trainer = two_ranks(api_client, namespace, pods, nodes, tmp_path, "50", "0", "0")
    try:
        # Rank 1 froze after step 50, perhaps before writing it; rank 0 finished step 50
        # (its all-reduce had rank 1's part) and beats on, waiting in step 51's.
        eventually(
            lambda: (
                ((b := heartbeat(api_client, namespace, pods[0])) and b.step >= 50)
                or not trainer.running()
            ),
            timeout=240,  # importing torch and 50 steps, on a loaded machine
            what="rank 0's heartbeat at the step rank 1 froze after",
        )
        assert trainer.running(), trainer.said()
        beats = heartbeat(api_client, namespace, pods[1])
        assert beats is not None, trainer.said()
        assert beats.step_seconds is not None, beats
        last, when = watch_until_deleted(api_client, namespace, pods)
        assert when - last < BOUND, f"{when - last} from the last step to the restart"
        fleet.wait_phase(nodes[1], "Quarantined", "Draining", "Remediating", "Validating")
        assert "Hang" in [t.get("reason") for t in fleet.gpunode(nodes[1])["status"]["history"]]
        assert fleet.phase(nodes[0]) == "Healthy"  # rank 0 only waited for rank 1
        fleet.wait_events(nodes[1], "Hang")
        told = [e.message for e in fleet.events(nodes[1]) if e.reason == "Hang"]
        assert any("stopped reporting first" in m for m in told), told
    finally:
        trainer.stop()


def test_a_checkpoint_pause_longer_than_the_stall_bound_is_no_hang(
    healthy_fleet: HealthyFleet,
    pitcrew: SimStack,
    api_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    fleet = healthy_fleet(size=3, hangs={"minStall": "15s"})
    nodes = fleet.nodes[:2]
    pods = jobset(api_client, fleet, namespace, "pauses", nodes)
    # Rank 0 announces a pause after step 50 and writes a checkpoint for 45 s: three
    # times the stall bound (15 s, over ten steps even on a loaded machine).
    trainer = two_ranks(api_client, namespace, pods, nodes, tmp_path, "0", "50", "45")
    try:
        eventually(
            lambda: (
                ((b := heartbeat(api_client, namespace, pods[0])) and b.paused_since)
                or not trainer.running()
            ),
            timeout=240,
            what="rank 0's heartbeat announcing its pause",
        )
        assert trainer.running(), trainer.said()
        paused = heartbeat(api_client, namespace, pods[0])
        assert paused is not None, trainer.said()
        eventually(
            lambda: (b := heartbeat(api_client, namespace, pods[0])) and b.step > paused.step,
            timeout=120,
            what="steps again after the pause",
        )
        time.sleep(2)  # a tick of the accountant after the pause
        assert all(deleted(api_client, namespace, p) is None for p in pods)
        assert [fleet.phase(n) for n in nodes] == ["Healthy", "Healthy"]
        assert trainer.running(), trainer.said()
    finally:
        trainer.stop()

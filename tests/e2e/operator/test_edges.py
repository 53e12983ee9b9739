"""Edges: dry run turned off, an operator restarted mid-repair, a pod stuck terminating."""

from __future__ import annotations

import time

from kubernetes import client

from pitcrew.dev.stack import SimStack
from support.fixtures import HealthyFleet
from support.fleet import NAMESPACE, eventually

FATAL_XID = [{"type": "xid", "gpu": 0, "code": 79}]


FAULTS = "sim.pitcrew.dev/faults"


def guard(api: client.ApiClient, namespace: str, labels: dict[str, str]) -> None:
    """A PodDisruptionBudget that refuses every eviction of the pods it selects."""
    client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(
        namespace,
        {
            "metadata": {"name": "frozen"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": labels}},
        },
    )


def reset_jobs(api: client.ApiClient, node: str) -> list[client.V1Job]:
    found = client.BatchV1Api(api).list_namespaced_job(
        NAMESPACE, label_selector=f"pitcrew.dev/node={node},pitcrew.dev/remediation=reset-gpu"
    )
    return list(found.items)


def test_turning_dry_run_off_starts_no_remediation_while_pods_run(
    healthy_fleet: HealthyFleet, workload_namespace: str, api_client: client.ApiClient
) -> None:
    fleet = healthy_fleet(size=2, safety={"dryRun": True, "drain": {"timeout": "5s"}})
    node = fleet.nodes[0]
    labels = {"app": "frozen"}
    fleet.pod(workload_namespace, "trainer-0", node, labels=labels)
    guard(api_client, workload_namespace, labels)
    fleet.inject(node, FATAL_XID)
    fleet.wait_phase(node, "Quarantined", timeout=20)
    time.sleep(8)  # past the drain timeout: in a dry run nothing may count as progress
    assert fleet.phase(node) == "Quarantined"
    fleet.custom.patch_cluster_custom_object(
        "pitcrew.dev",
        "v1alpha1",
        "gpuhealthpolicies",
        fleet.group,
        {"spec": {"safety": {"dryRun": False, "drain": {"timeout": "10m"}}}},
    )
    fleet.wait_phase(node, "Draining", timeout=20)
    time.sleep(8)
    status = fleet.gpunode(node)["status"]
    assert status["phase"] == "Draining"  # the pod still runs: no rung
    assert not status.get("remediations")
    assert reset_jobs(api_client, node) == []
    assert fleet.pod_running(workload_namespace, "trainer-0")


def test_a_restarted_operator_resumes_draining_and_remediating_nodes_as_they_were(
    healthy_fleet: HealthyFleet,
    workload_namespace: str,
    api_client: client.ApiClient,
    pitcrew: SimStack,
) -> None:
    fleet = healthy_fleet(
        size=4,
        safety={"maxUnhealthy": 2, "maxConcurrentRemediations": 2, "maxConcurrentDrains": 2},
        remediation={"ladders": {"fatal": [{"action": "reset-gpu", "timeout": "30m"}]}},
    )
    draining, remediating = fleet.nodes[0], fleet.nodes[1]
    labels = {"app": "frozen"}
    fleet.pod(workload_namespace, "trainer-0", draining, labels=labels)
    guard(api_client, workload_namespace, labels)
    fleet.core.patch_node(
        remediating,
        {"metadata": {"annotations": {"sim.pitcrew.dev/repair-fails": "reset-gpu"}}},
    )
    fleet.inject(draining, FATAL_XID)
    fleet.inject(remediating, FATAL_XID)
    fleet.wait_phase(draining, "Draining", timeout=30)
    fleet.wait_phase(remediating, "Remediating", timeout=30)
    eventually(lambda: reset_jobs(api_client, remediating), what="the reset Job")
    eventually(
        lambda: (fleet.gpunode(remediating)["status"].get("remediation") or {}).get("confirmed"),
        what="the reset confirmed by its Job's success (the sim's repair still fails)",
    )
    before = {n: fleet.gpunode(n)["status"] for n in (draining, remediating)}
    leader = next(n for n in pitcrew.running if n.startswith("operator"))
    for name in [n for n in pitcrew.running if n.startswith("operator")]:
        pitcrew.kill(name)  # SIGKILL: the successor starts from the cluster alone
    pitcrew.start_operator(leader)
    eventually(
        lambda: "initial lists complete" in pitcrew.log(leader).split("is the leader")[-1],
        timeout=60,
        what="the restarted operator to list the cluster",
    )
    time.sleep(6)  # several rounds and resyncs of the new leader
    for node, old in before.items():
        new = fleet.gpunode(node)["status"]
        assert new["phase"] == old["phase"], node
        assert new["history"] == old["history"], node
        assert new.get("remediations") == old.get("remediations"), node
        assert (new.get("drain") or {}).get("startedAt") == (old.get("drain") or {}).get(
            "startedAt"
        ), node
        assert new.get("remediation") == old.get("remediation"), node
    assert len(reset_jobs(api_client, remediating)) == 1
    assert fleet.pod_running(workload_namespace, "trainer-0")


def test_a_pod_stuck_terminating_releases_the_drain_after_its_timeout(
    healthy_fleet: HealthyFleet, workload_namespace: str, api_client: client.ApiClient
) -> None:
    fleet = healthy_fleet(
        size=2,
        safety={"drain": {"timeout": "10s"}},
        remediation={"ladders": {"fatal": [{"action": "reset-gpu", "timeout": "30m"}]}},
    )
    node = fleet.nodes[0]
    fleet.pod(workload_namespace, "stuck-0", node)
    fleet.core.patch_namespaced_pod(
        "stuck-0",
        workload_namespace,
        {"metadata": {"finalizers": ["e2e.pitcrew.dev/hold"]}},
    )
    try:
        fleet.inject(node, FATAL_XID)
        fleet.wait_phase(node, "Draining", timeout=20)
        eventually(
            lambda: (
                fleet.core.read_namespaced_pod(
                    "stuck-0", workload_namespace
                ).metadata.deletion_timestamp
            ),
            what="the pod terminating (held by its finalizer)",
        )
        status = fleet.wait_phase(node, "Remediating", "Validating", "Healthy", timeout=60)
        history = [h["to"] for h in status["status"]["history"]]
        assert "Remediating" in history or status["status"]["phase"] == "Remediating"
        fleet.wait_events(node, "DrainTimeoutTerminating")
    finally:
        fleet.core.patch_namespaced_pod(
            "stuck-0", workload_namespace, {"metadata": {"finalizers": None}}
        )


def test_simulated_agents_report_with_the_agent_accounts_pod_bound_tokens(
    healthy_fleet: HealthyFleet, pitcrew: SimStack
) -> None:
    # Healthy means reported: only an agent token bound to its pod can write.
    fleet = healthy_fleet(size=2)
    pods = fleet.core.list_namespaced_pod(NAMESPACE, label_selector="sim.pitcrew.dev/agent=true")
    on = {p.spec.node_name: p for p in pods.items if p.spec.node_name in fleet.nodes}
    assert set(on) == set(fleet.nodes)
    assert all(p.spec.service_account_name == "pitcrew-agent" for p in on.values())
    assert "--agent-account" in " ".join(pitcrew.running["sim-agents"].args)


def test_a_malformed_progress_annotation_gets_one_event_and_the_node_stays_healthy(
    healthy_fleet: HealthyFleet, workload_namespace: str
) -> None:
    # Whoever can patch a training pod can write anything into its progress annotation.
    fleet = healthy_fleet(size=2)
    node = fleet.nodes[0]
    fleet.pod(
        workload_namespace,
        "trainer-bad",
        node,
        labels={"pitcrew.dev/job": "bad-progress"},
        annotations={"pitcrew.dev/progress": "{" * 10_000},
    )

    def flagged() -> list[client.CoreV1Event]:
        return [
            e
            for e in fleet.core.list_namespaced_event(workload_namespace).items
            if e.involved_object.name == "trainer-bad" and e.reason == "MalformedProgress"
        ]

    events = eventually(flagged, timeout=30, what="a MalformedProgress Event on the pod")
    assert "over the 4096 Pitcrew reads" in events[0].message
    time.sleep(12)  # two more accounting ticks: the same value is not flagged again
    assert [e.count for e in flagged()] == [1]
    assert fleet.phase(node) == "Healthy"
    assert fleet.pod_running(workload_namespace, "trainer-bad")


def test_a_malformed_fault_list_on_a_node_gets_one_event_and_changes_nothing(
    healthy_fleet: HealthyFleet,
) -> None:
    """Whoever can annotate a simulated machine (its kubelet, in a devcluster) can write
    anything as its fault list: the agent flags it once and keeps what it had."""
    fleet = healthy_fleet(size=2)
    node = fleet.nodes[0]
    fleet.core.patch_node(node, {"metadata": {"annotations": {FAULTS: "[{not json"}}})

    def flagged() -> list[client.CoreV1Event]:
        return [e for e in fleet.events(node) if e.reason == "MalformedFaults"]

    events = eventually(flagged, timeout=30, what="a MalformedFaults Event on the Node")
    assert "fault list is not JSON" in events[0].message
    time.sleep(5)  # more sweeps: the same value is not flagged again
    assert [e.count for e in flagged()] == [1]
    assert fleet.phase(node) == "Healthy"

"""Safety: circuit breaker, dry run, spares, least privilege."""

from __future__ import annotations

import time

from kubernetes import client

from support.fixtures import HealthyFleet
from support.fleet import NAMESPACE, Fleet, eventually

FATAL_XID = [{"type": "xid", "gpu": 0, "code": 79}]


def test_breaker_trips_at_20_percent_and_no_more_nodes_are_cordoned(
    healthy_fleet: HealthyFleet,
) -> None:
    fleet = healthy_fleet(
        size=10,
        safety={"maxUnhealthy": "20%"},
        remediation={
            "ladders": {"fatal": [{"action": "webhook", "timeout": "1h"}]},
            "webhook": {"url": "http://127.0.0.1:9/unreachable"},
        },
    )
    failing = fleet.nodes[:3]
    for node in failing:
        fleet.inject(node, FATAL_XID)
    policy_status = eventually(
        lambda: (status := fleet.policy_status()).get("breaker", {}).get("open") and status,
        timeout=30,
        what="breaker open",
    )
    assert policy_status["unhealthy"] == 2
    time.sleep(5)  # several reconcile rounds: nothing more may be cordoned
    cordoned = [n for n in fleet.nodes if fleet.node(n).spec.unschedulable]
    assert len(cordoned) == 2
    refused = next(n for n in failing if n not in cordoned)
    status = fleet.gpunode(refused)["status"]
    assert status["phase"] == "Healthy"
    admitted = next(c for c in status["conditions"] if c["type"] == "Admitted")
    assert admitted["reason"] == "CircuitBreakerOpen"
    assert "limit 2" in admitted["message"]
    assert "CircuitBreakerOpen" in {
        e.reason
        for e in fleet.core.list_namespaced_event("default").items
        if e.involved_object.name == fleet.group
    }


def test_dry_run_decides_and_records_but_writes_nothing(
    healthy_fleet: HealthyFleet, workload_namespace: str
) -> None:
    fleet = healthy_fleet(size=2, safety={"dryRun": True})
    node = fleet.nodes[0]
    fleet.pod(workload_namespace, "trainer-0", node)
    pod_version = fleet.core.read_namespaced_pod(
        "trainer-0", workload_namespace
    ).metadata.resource_version
    node_before = fleet.node(node)
    fleet.inject(node, FATAL_XID)
    # The dry run's cordon never lands, so the node never gets past Quarantined.
    fleet.wait_phase(node, "Quarantined", timeout=20)
    time.sleep(3)
    assert fleet.phase(node) == "Quarantined"
    after = fleet.node(node)
    assert not after.spec.unschedulable
    assert after.spec.taints == node_before.spec.taints
    managers = {m.manager for m in after.metadata.managed_fields or []}
    assert "pitcrew-operator" not in managers
    pod = fleet.core.read_namespaced_pod("trainer-0", workload_namespace)
    assert pod.metadata.resource_version == pod_version
    assert pod.metadata.deletion_timestamp is None
    jobs = (
        client.BatchV1Api(fleet.api)
        .list_namespaced_job(NAMESPACE, label_selector=f"pitcrew.dev/node={node}")
        .items
    )
    assert jobs == []
    fleet.wait_events(node, "DryRunXid")


def test_spare_is_released_when_a_node_is_quarantined(fleet_factory: type[Fleet]) -> None:
    fleet = fleet_factory(size=3)
    fleet.policy(spares={"count": 1})

    def settled() -> str | None:
        phases = {n: fleet.phase(n) for n in fleet.nodes}
        spares = [n for n, p in phases.items() if p == "Spare"]
        in_service = sorted(phases.values()) == ["Healthy", "Healthy", "Spare"]
        if in_service and "pitcrew.dev/spare" in fleet.taints(spares[0]):
            return spares[0]
        return None

    spare = eventually(settled, what="one tainted spare and two nodes in service")
    victim = next(n for n in fleet.nodes if n != spare)
    before = len(fleet.history(spare))
    fleet.inject(victim, FATAL_XID)
    eventually(
        lambda: "pitcrew.dev/spare" not in fleet.taints(spare),
        timeout=20,
        what="spare taint removed",
    )
    fleet.wait_events(spare, "SpareReleased")
    # Once the victim is repaired the fleet wants a spare again and any idle node
    # (the released one included) may be held back: what matters is that the
    # released spare went into service.
    eventually(
        lambda: "Healthy" in fleet.history(spare)[before:],
        what=f"{spare} in service after its release",
    )


def test_operator_has_no_permission_beyond_the_charts_rbac(
    api_client: client.ApiClient, pitcrew: object
) -> None:
    def can(verb: str, resource: str, namespace: str = "", group: str = "") -> bool:
        review = client.AuthorizationV1Api(api_client).create_subject_access_review(
            {
                "spec": {
                    "user": f"system:serviceaccount:{NAMESPACE}:pitcrew-operator",
                    "groups": ["system:serviceaccounts"],
                    "resourceAttributes": {
                        "verb": verb,
                        "resource": resource,
                        "namespace": namespace,
                        "group": group,
                    },
                }
            }
        )
        return bool(review.status.allowed)

    assert can("create", "pods/eviction", "train")
    assert can("patch", "nodes")
    assert not can("delete", "nodes")
    assert not can("get", "secrets", "kube-system")
    assert can("get", "secrets", NAMESPACE)
    assert not can("create", "clusterrolebindings", group="rbac.authorization.k8s.io")
    assert not can("update", "deployments", "default", group="apps")

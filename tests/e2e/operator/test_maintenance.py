"""Planned maintenance on the real apiserver: a MaintenanceWindow drains its node at
the job's checkpoint before the window, keeps it out during it and revalidates it
after; a medik8s NodeMaintenance is honoured the same way."""

from __future__ import annotations

import datetime
import json
import time

import pytest
from kubernetes import client

from support.fixtures import HealthyFleet
from support.fleet import NODE_MAINTENANCE, eventually

GROUP, VERSION = "pitcrew.dev", "v1alpha1"


def iso(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_window_drains_at_the_checkpoint_keeps_the_node_out_and_revalidates_it(
    healthy_fleet: HealthyFleet, workload_namespace: str
) -> None:
    fleet = healthy_fleet(size=2, safety={"drain": {"checkpointMaxDelay": "5m"}})
    node, other = fleet.nodes
    fleet.pod(workload_namespace, "trainer-0", node, labels={"pitcrew.dev/job": "llm"})
    now = datetime.datetime.now(datetime.UTC)
    start, end = now + datetime.timedelta(seconds=20), now + datetime.timedelta(seconds=50)
    name = f"{fleet.group}-fw"
    fleet.custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "maintenancewindows",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "MaintenanceWindow",
            "metadata": {"name": name},
            "spec": {"start": iso(start), "end": iso(end), "nodes": [node], "reason": "fw 550"},
        },
    )
    try:
        # Within checkpointMaxDelay of the start: out of service, the job runs on.
        status = fleet.wait_phase(node, "Suspect", timeout=30)["status"]
        assert status["reason"] == "Maintenance"
        assert f"MaintenanceWindow/{name}" in status["message"]
        assert fleet.node(node).spec.unschedulable
        assert fleet.pod_exists(workload_namespace, "trainer-0")
        # The job checkpoints: drained, then kept out through the window.
        fleet.core.patch_namespaced_pod(
            "trainer-0",
            workload_namespace,
            {
                "metadata": {
                    "annotations": {
                        "pitcrew.dev/checkpoint-at": datetime.datetime.now(datetime.UTC).isoformat()
                    }
                }
            },
        )
        fleet.wait_phase(node, "Maintenance", timeout=30)
        assert not fleet.pod_exists(workload_namespace, "trainer-0")
        while datetime.datetime.now(datetime.UTC) < end - datetime.timedelta(seconds=2):
            assert fleet.phase(node) == "Maintenance"
            assert fleet.node(node).spec.unschedulable
            assert fleet.phase(other) == "Healthy"
            time.sleep(1)
        # After the window: revalidated before it takes work again.
        fleet.wait_phase(node, "Healthy", timeout=90)
        history = fleet.history(node)
        assert history[-3:] == ["Maintenance", "Validating", "Healthy"], history
        assert not fleet.node(node).spec.unschedulable
    finally:
        fleet.custom.delete_cluster_custom_object(GROUP, VERSION, "maintenancewindows", name)


def test_a_window_that_ends_before_it_starts_is_refused_with_a_sentence(
    custom: client.CustomObjectsApi,
) -> None:
    with pytest.raises(client.ApiException) as refused:
        custom.create_cluster_custom_object(
            GROUP,
            VERSION,
            "maintenancewindows",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "MaintenanceWindow",
                "metadata": {"name": "backwards"},
                "spec": {
                    "start": "2026-12-05T14:00:00Z",
                    "end": "2026-12-05T13:00:00Z",
                    "nodes": ["n1"],
                },
            },
        )
    assert refused.value.status == 422
    assert "end must be after start" in str(refused.value.body)


def test_a_medik8s_node_maintenance_is_honoured(healthy_fleet: HealthyFleet) -> None:
    fleet = healthy_fleet(size=2)
    node = fleet.nodes[1]
    group, version, _ = NODE_MAINTENANCE
    name = f"{fleet.group}-psu"
    fleet.custom.create_cluster_custom_object(
        group,
        version,
        "nodemaintenances",
        {
            "apiVersion": f"{group}/{version}",
            "kind": "NodeMaintenance",
            "metadata": {"name": name},
            "spec": {"nodeName": node, "reason": "replace PSU"},
        },
    )
    try:
        status = fleet.wait_phase(node, "Maintenance", timeout=45)["status"]
        assert f"NodeMaintenance/{name}" in status["message"]
        assert fleet.node(node).spec.unschedulable
    finally:
        fleet.custom.delete_cluster_custom_object(group, version, "nodemaintenances", name)
    fleet.wait_phase(node, "Healthy", timeout=90)
    assert fleet.history(node)[-2:] == ["Validating", "Healthy"]


def test_a_node_maintenance_version_no_longer_served_keeps_the_node_out_and_says_so(
    healthy_fleet: HealthyFleet,
) -> None:
    # The medik8s API moves on: v1beta1, which the operator reads, is no longer served
    # (a 404 to the listing). Its requests are not gone: the node people work on stays
    # out, and the policy's status says why.
    fleet = healthy_fleet(size=2)
    node = fleet.nodes[1]
    group, version, _ = NODE_MAINTENANCE
    name = f"{fleet.group}-fw"
    fleet.custom.create_cluster_custom_object(
        group,
        version,
        "nodemaintenances",
        {
            "apiVersion": f"{group}/{version}",
            "kind": "NodeMaintenance",
            "metadata": {"name": name},
            "spec": {"nodeName": node, "reason": "firmware"},
        },
    )
    extensions = client.ApiextensionsV1Api(fleet.api)
    definition = f"nodemaintenances.{group}"
    raw = extensions.read_custom_resource_definition(definition, _preload_content=False)
    (old,) = json.loads(raw.data)["spec"]["versions"]

    def serve(*versions: dict[str, object]) -> None:
        extensions.patch_custom_resource_definition(
            definition, {"spec": {"versions": list(versions)}}
        )

    try:
        fleet.wait_phase(node, "Maintenance", timeout=45)
        serve(
            {**old, "served": False},
            {**old, "name": "v1", "served": True, "storage": False},
        )

        def not_served() -> bool:
            try:
                fleet.custom.list_cluster_custom_object(group, version, "nodemaintenances")
            except client.ApiException as error:
                return error.status == 404
            return False

        eventually(not_served, timeout=30, what=f"{group}/{version} no longer served")

        def said() -> dict[str, object] | None:
            conditions = fleet.policy_status().get("conditions") or []
            return next((c for c in conditions if c["type"] == "MaintenanceRequests"), None)

        condition = eventually(said, timeout=60, what="MaintenanceRequests in the policy")
        assert condition["status"] == "False"
        assert "not v1beta1" in str(condition["message"])
        time.sleep(5)  # rounds after the listing failed: the window still holds
        assert fleet.phase(node) == "Maintenance"
        # Served again: read again, said so, and the request's deletion ends the window.
        serve({**old, "served": True})
        eventually(
            lambda: (c := said()) is not None and c["status"] == "True",
            timeout=60,
            what="MaintenanceRequests True again",
        )
        fleet.custom.delete_cluster_custom_object(group, version, "nodemaintenances", name)
        fleet.wait_phase(node, "Healthy", timeout=90)
    finally:
        serve({**old, "served": True})
        try:
            fleet.custom.delete_cluster_custom_object(group, version, "nodemaintenances", name)
        except client.ApiException as error:
            if error.status != 404:
                raise

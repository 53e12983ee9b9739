"""The operator's cache: stale events never undo the operator's own writes."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

from gpuhealth.report import FaultClass
from pitcrew.api.gpunode import Phase
from pitcrew.controller.store import Store
from pitcrew.core.convert import gpunode_status, node_view
from support.shell_fakes import gpunode, healthy_status, node_object, policy_object, version


def test_an_event_older_than_the_stored_object_is_ignored() -> None:
    store = Store()
    written = node_object("n0")
    store.put("node", written)
    stale = copy.deepcopy(written)
    stale["metadata"]["resourceVersion"] = str(int(written["metadata"]["resourceVersion"]) - 1)
    stale["spec"]["unschedulable"] = True
    store.put("node", stale)
    assert store.nodes["n0"] == written


def test_a_pod_moving_nodes_is_listed_only_on_its_new_node() -> None:
    store = Store()
    pod = {"metadata": {"name": "p", "namespace": "t", "resourceVersion": "1"}, "spec": {}}
    pod["spec"]["nodeName"] = "a"
    assert store.put("pod", pod) == "a"
    moved = copy.deepcopy(pod)
    moved["metadata"]["resourceVersion"] = "2"
    moved["spec"]["nodeName"] = "b"
    assert store.put("pod", moved) == "b"
    assert store.pods_on("a") == []
    assert [p["metadata"]["name"] for p in store.pods_on("b")] == ["p"]
    assert store.put("pod", moved, deleted=True) == "b"
    assert store.pods_on("b") == []


def test_a_policy_change_rematches_every_node() -> None:
    store = Store()
    store.put("node", node_object("n0"))
    assert store.policies_of("n0") == ()
    store.put("policy", policy_object())
    assert store.policies_of("n0") == ("fleet",)
    elsewhere = policy_object(nodeSelector={"matchLabels": {"pool": "other"}})
    elsewhere["metadata"]["resourceVersion"] = "999999"
    store.put("policy", elsewhere)
    assert store.policies_of("n0") == ()


def test_a_status_is_parsed_once_per_resource_version() -> None:
    store = Store()
    store.put("gpunode", gpunode("n0", healthy_status()))
    first = store.status("n0")
    assert store.status("n0") is first
    assert store.summary("n0").phase is Phase.HEALTHY


def test_a_stored_status_is_parsed_from_the_event_not_unpacked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = Store()
    store.put("gpunode", gpunode("n0", healthy_status()))
    monkeypatch.setattr(store, "gpunode", lambda name: pytest.fail("unpacked on the put"))
    store.put("gpunode", gpunode("n0", healthy_status(fault=FaultClass.FATAL)))
    assert store.summary("n0").phase is Phase.HEALTHY
    assert [r.name for r in store.status("n0").checks.results] == ["gpu-count", "xid"]


def test_the_store_keeps_of_a_node_only_what_decisions_read() -> None:
    node = node_object("n0")
    node["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    node["metadata"]["annotations"] = {"pitcrew.dev/last-remediation": "{}"}
    node["spec"]["taints"] = [{"key": "pitcrew.dev/quarantined", "effect": "NoSchedule"}]
    node["status"].update(
        images=[{"names": [f"nvcr.io/nvidia/pytorch:24.{m:02d}-py3"], "sizeBytes": 9e9}
                for m in range(1, 13)],
        nodeInfo={"bootID": "b-1", "kernelVersion": "6.8.0", "kubeletVersion": "v1.35.0"},
        addresses=[{"type": "InternalIP", "address": "10.0.0.7"}],
        daemonEndpoints={"kubeletEndpoint": {"Port": 10250}},
    )  # fmt: skip
    watched = copy.deepcopy(node)
    store = Store()
    store.put("node", node)
    kept = store.nodes["n0"]
    assert "managedFields" not in kept["metadata"]
    assert set(kept["status"]) == {"capacity", "conditions", "addresses", "nodeInfo"}
    assert kept["status"]["nodeInfo"] == {"bootID": "b-1"}
    assert node_view(kept) == node_view(watched)
    assert node == watched  # the watch's own object is left as it was


def test_the_store_drops_a_gpunodes_managed_fields_and_reads_the_same_status() -> None:
    obj = gpunode("n0", healthy_status())
    obj["metadata"]["managedFields"] = [
        {"manager": "pitcrew-agent", "operation": "Apply", "fieldsV1": {"f:status": {}}}
    ]
    store = Store()
    store.put("gpunode", obj)
    assert "managedFields" not in store.gpunodes["n0"]["metadata"]
    assert store.status("n0") == gpunode_status(obj)


def test_a_heartbeat_changes_no_nodes_place_in_the_fleet_a_phase_change_does() -> None:
    store = Store()
    store.put("node", node_object("n0"))
    store.put("gpunode", gpunode("n0", healthy_status()))
    assert store.take_fleet_changes() == {"n0"}
    later = healthy_status().model_copy(
        update={"last_heartbeat": healthy_status().last_heartbeat + datetime.timedelta(minutes=5)}
    )
    store.put("gpunode", gpunode("n0", later))
    assert store.take_fleet_changes() == set()  # the fleet counts are what they were
    drained = later.model_copy(update={"phase": Phase.DRAINING})
    store.put("gpunode", gpunode("n0", drained))
    assert store.take_fleet_changes() == {"n0"}
    store.put("gpunode", gpunode("n0", drained), deleted=True)
    store.put("node", node_object("n0"), deleted=True)
    assert store.take_fleet_changes() == {"n0"}


def test_a_kubelets_status_heartbeat_queues_no_decision_a_ready_flip_does() -> None:
    store = Store()
    node = node_object("n0")
    node["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-12-05T10:00:00Z"}
    ]
    assert store.put("node", node) == "n0"
    beat = copy.deepcopy(node)
    beat["metadata"]["resourceVersion"] = version()
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-12-05T10:05:00Z"
    assert store.put("node", beat) is None
    assert store.nodes["n0"]["metadata"]["resourceVersion"] == beat["metadata"]["resourceVersion"]
    down = copy.deepcopy(beat)
    down["metadata"]["resourceVersion"] = version()
    down["status"]["conditions"][0]["status"] = "False"
    assert store.put("node", down) == "n0"
    relabelled = copy.deepcopy(down)
    relabelled["metadata"]["resourceVersion"] = version()
    relabelled["metadata"]["labels"]["pitcrew.dev/managed"] = "false"
    assert store.put("node", relabelled) == "n0"


def test_a_policy_status_write_keeps_every_nodes_match_and_the_fleet() -> None:
    store = Store()
    store.put("node", node_object("n0"))
    policy = policy_object()
    store.put("policy", policy)
    assert store.policies_of("n0") == ("fleet",)
    store.take_fleet_changes()
    written = copy.deepcopy(policy)
    written["metadata"]["resourceVersion"] = version()
    written["status"] = {"nodes": 1}
    store.put("policy", written)
    assert store.take_fleet_changes() == set()
    narrowed = copy.deepcopy(written)
    narrowed["metadata"]["resourceVersion"] = version()
    narrowed["spec"]["nodeSelector"] = {"matchLabels": {"pool": "other"}}
    store.put("policy", narrowed)
    assert store.take_fleet_changes() == {"n0"}
    assert store.policies_of("n0") == ()


def test_a_budgets_disrupted_pods_are_remembered_after_its_controller_drops_them() -> None:
    store = Store()

    def pdb(*disrupted: str) -> dict[str, Any]:
        return {
            "metadata": {"namespace": "train", "name": "llm", "resourceVersion": version()},
            "spec": {"selector": {"matchLabels": {"app": "llm"}}},
            "status": {"disruptionsAllowed": 0, "disruptedPods": dict.fromkeys(disrupted, "t")},
        }

    evicted = pdb("a")  # the eviction's write
    store.put("pdb", evicted)
    store.put("pdb", pdb())  # the controller saw the pod terminating
    assert store.disrupted("train/llm") == {"a": int(evicted["metadata"]["resourceVersion"])}
    store.put("pdb", pdb(), deleted=True)
    assert store.disrupted("train/llm") == {}

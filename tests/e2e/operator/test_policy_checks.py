"""A policy's checks reach the agents: change the policy, and the nodes answer to it.

The operator publishes the policy's checks in each GPUNode's ``spec.checks``;
the simulated agents follow their GPUNode as a real agent does and run them
from the next sweep, on the noisy simulated backend.
"""

from __future__ import annotations

from typing import Any

from support.fixtures import HealthyFleet
from support.fleet import Fleet, eventually

GROUP, VERSION = "pitcrew.dev", "v1alpha1"


def set_checks(fleet: Fleet, **checks: Any) -> None:
    fleet.custom.patch_cluster_custom_object(
        GROUP,
        VERSION,
        "gpuhealthpolicies",
        fleet.group,
        {"spec": {"checks": {"interval": "2s", "heartbeat": "30s", **checks}}},
    )


def published(fleet: Fleet, node: str) -> dict[str, Any]:
    return dict((fleet.gpunode(node).get("spec") or {}).get("checks") or {})


def test_policy_thresholds_disabled_checks_and_gpu_count_reach_the_agent(
    healthy_fleet: HealthyFleet,
) -> None:
    fleet = healthy_fleet(size=1)
    node = fleet.nodes[0]
    assert published(fleet, node)["expectedGpus"] == 8  # the node's capacity
    fleet.wait_events(node, "ChecksConfigured")

    # Ports run at 400 Gb/s: expecting 800 makes every port a degraded finding.
    set_checks(fleet, thresholds={"ib.expected_rate_gbps": 800})
    eventually(
        lambda: published(fleet, node).get("thresholds") == {"ib.expected_rate_gbps": 800},
        what="the new threshold published",
    )
    # No pods: a Suspect node drains at once and moves on to its ladder.
    eventually(lambda: "Suspect" in fleet.history(node), timeout=30, what="taken out as Suspect")
    results = fleet.gpunode(node)["status"]["checks"]["results"]
    failing = [c for c in results if c["status"] == "fail"]
    assert failing
    assert {c["name"] for c in failing} == {"ib"}
    assert all((c["threshold"], c["faultClass"]) == (800, "degraded") for c in failing)

    # Turning the check off clears the finding: back in service.
    set_checks(fleet, thresholds={"ib.expected_rate_gbps": 800}, disabled=["ib"])
    fleet.wait_phase(node, "Healthy", timeout=90)
    results = fleet.gpunode(node)["status"]["checks"]["results"]
    assert not any(c["name"] == "ib" for c in results)

    # Nine GPUs expected on an 8-GPU node: a fatal GPU-count finding.
    before = len(fleet.history(node))
    set_checks(fleet, expectedGpus=9)
    eventually(
        lambda: "Quarantined" in fleet.history(node)[before:],
        timeout=30,
        what="quarantined",
    )
    results = fleet.gpunode(node)["status"]["checks"]["results"]
    count = next(c for c in results if c["name"] == "gpu-count")
    assert (count["status"], count["faultClass"], count["threshold"]) == ("fail", "fatal", 9)

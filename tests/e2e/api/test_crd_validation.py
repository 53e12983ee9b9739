"""The apiserver refuses invalid Pitcrew objects with a message a person understands.

Each case is one broken object and the sentence the apiserver must answer
with; the schema and CEL rules that produce them are generated from the
pydantic models, so this proves the generated CRDs, not a copy of them.
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

GROUP, VERSION = "pitcrew.dev", "v1alpha1"

VALID_POLICY: dict[str, Any] = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "GPUHealthPolicy",
    "spec": {"nodeSelector": {"matchLabels": {"nvidia.com/gpu.present": "true"}}},
}
VALID_RUN: dict[str, Any] = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "ValidationRun",
    "spec": {"nodeSelector": {"matchLabels": {"nvidia.com/gpu.present": "true"}}},
}


def with_spec(base: dict[str, Any], **spec: Any) -> dict[str, Any]:
    body = copy.deepcopy(base)
    body["spec"].update(spec)
    return body


INVALID_POLICIES = {
    "both breaker bounds": (
        with_spec(VALID_POLICY, safety={"maxUnhealthy": 3, "minHealthy": "90%"}),
        "set either maxUnhealthy or minHealthy, not both",
    ),
    "percentage above 100": (
        with_spec(VALID_POLICY, safety={"maxUnhealthy": "150%"}),
        "maxUnhealthy must be a non-negative number of nodes or a percentage like '10%'",
    ),
    "unknown threshold": (
        with_spec(VALID_POLICY, checks={"thresholds": {"ecc.sbe_per_hour": 10}}),
        "unknown threshold name; valid names: clocks.hw_slowdown_grace_s, ecc.dbe_max,",
    ),
    "unknown check": (
        with_spec(VALID_POLICY, checks={"disabled": ["nvlinks"]}),
        'Unsupported value: "nvlinks": supported values: "gpu-count", "gpu-lost", "xid"',
    ),
    "node annotations as BMC source without an allowlist": (
        with_spec(VALID_POLICY, remediation={"redfish": {"nodeAnnotations": {"enabled": True}}}),
        "nodeAnnotations.enabled needs allowedEndpoints",
    ),
    "BMC allowlist entry that is a URL": (
        with_spec(
            VALID_POLICY,
            remediation={
                "redfish": {
                    "nodeAnnotations": {"enabled": True, "allowedEndpoints": ["https://bmc/"]}
                }
            },
        ),
        "allowedEndpoints takes CIDRs like 10.20.0.0/16 and lower-case host names",
    ),
    "goodput window past a day": (
        with_spec(VALID_POLICY, goodput={"windows": ["1h", "7d"]}),
        "each goodput window must be between 1m and 24h",
    ),
    "verification more often than every 5m": (
        with_spec(
            VALID_POLICY,
            validation={"priorityClassName": "p", "periodic": {"enabled": True, "interval": "1m"}},
        ),
        "validation.periodic.interval must be at least 5m",
    ),
    "verification of no node at once": (
        with_spec(VALID_POLICY, validation={"periodic": {"maxConcurrent": 0}}),
        "validation.periodic.maxConcurrent must be at least 1 node or a percentage",
    ),
    "verification at 0 percent": (
        with_spec(VALID_POLICY, validation={"periodic": {"maxConcurrent": "0%"}}),
        "validation.periodic.maxConcurrent must be at least 1 node or a percentage",
    ),
    "verification without a probe PriorityClass": (
        with_spec(VALID_POLICY, validation={"periodic": {"enabled": True}}),
        "validation.periodic needs validation.priorityClassName",
    ),
    "empty selector": (
        with_spec(VALID_POLICY, nodeSelector={}),
        "an empty selector would match every node in the cluster",
    ),
    "In without values": (
        with_spec(
            VALID_POLICY,
            nodeSelector={
                "matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In"}]
            },
        ),
        "operators In and NotIn need at least one value",
    ),
    "zero drain timeout": (
        with_spec(VALID_POLICY, safety={"drain": {"timeout": "0s"}}),
        "drain.timeout must be longer than 0s",
    ),
    "duration in words": (
        with_spec(VALID_POLICY, checks={"interval": "5 minutes"}),
        "spec.checks.interval: Invalid value",
    ),
    "step after retire": (
        with_spec(
            VALID_POLICY,
            remediation={"ladders": {"fatal": [{"action": "retire"}, {"action": "reboot"}]}},
        ),
        "retire ends a ladder: no step can follow it",
    ),
    "unknown remediation action": (
        with_spec(VALID_POLICY, remediation={"ladders": {"degraded": [{"action": "explode"}]}}),
        'Unsupported value: "explode"',
    ),
    "no concurrent drains": (
        with_spec(VALID_POLICY, safety={"maxConcurrentDrains": 0}),
        "spec.safety.maxConcurrentDrains: Invalid value: 0: "
        "spec.safety.maxConcurrentDrains in body should be greater than or equal to 1",
    ),
    "missing node selector": (
        {**VALID_POLICY, "spec": {}},
        "spec.nodeSelector: Required value",
    ),
    "webhook without scheme": (
        with_spec(VALID_POLICY, remediation={"webhook": {"url": "rma.example.com/api"}}),
        "webhook url must start with http:// or https://",
    ),
}

INVALID_RUNS = {
    "unknown suite": (with_spec(VALID_RUN, suite="extreme"), 'Unsupported value: "extreme"'),
    "no concurrency": (
        with_spec(VALID_RUN, maxConcurrentNodes=0),
        "maxConcurrentNodes in body should be greater than or equal to 1",
    ),
}


def rejection(custom: client.CustomObjectsApi, plural: str, body: dict[str, Any]) -> str:
    body = {**body, "metadata": {"name": f"invalid-{uuid.uuid4().hex[:8]}"}}
    with pytest.raises(client.ApiException) as caught:
        custom.create_cluster_custom_object(GROUP, VERSION, plural, body)
    assert caught.value.status == 422, caught.value.body
    return str(json.loads(caught.value.body)["message"])


@pytest.mark.parametrize(("body", "message"), INVALID_POLICIES.values(), ids=INVALID_POLICIES)
def test_invalid_policy_is_rejected_with_its_reason(
    custom: client.CustomObjectsApi, body: dict[str, Any], message: str
) -> None:
    assert message in rejection(custom, "gpuhealthpolicies", body)


@pytest.mark.parametrize(("body", "message"), INVALID_RUNS.values(), ids=INVALID_RUNS)
def test_invalid_validation_run_is_rejected_with_its_reason(
    custom: client.CustomObjectsApi, body: dict[str, Any], message: str
) -> None:
    assert message in rejection(custom, "validationruns", body)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"safety": {"maxUnhealty": 3}}, "spec.safety.maxUnhealty"),
        # The credentials Secret is always in the operator's namespace: it may read
        # no other, so the schema has no namespace to get wrong.
        (
            {"remediation": {"redfish": {"credentialsSecret": {"name": "b", "namespace": "x"}}}},
            "spec.remediation.redfish.credentialsSecret.namespace",
        ),
    ],
)
def test_unknown_field_is_rejected_under_strict_validation(
    custom: client.CustomObjectsApi, spec: dict[str, Any], field: str
) -> None:
    body = with_spec(VALID_POLICY, **spec)
    body["metadata"] = {"name": f"typo-{uuid.uuid4().hex[:8]}"}
    with pytest.raises(client.ApiException) as caught:
        custom.create_cluster_custom_object(
            GROUP, VERSION, "gpuhealthpolicies", body, field_validation="Strict"
        )
    assert caught.value.status == 400
    assert f'unknown field "{field}"' in json.loads(caught.value.body)["message"]


def test_validation_run_spec_cannot_change(custom: client.CustomObjectsApi) -> None:
    name = f"immutable-{uuid.uuid4().hex[:8]}"
    custom.create_cluster_custom_object(
        GROUP, VERSION, "validationruns", {**VALID_RUN, "metadata": {"name": name}}
    )
    try:
        with pytest.raises(client.ApiException) as caught:
            custom.patch_cluster_custom_object(
                GROUP, VERSION, "validationruns", name, {"spec": {"suite": "burn-in"}}
            )
        assert "a ValidationRun cannot be changed once created" in caught.value.body
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, "validationruns", name)


def test_gpunode_must_be_named_after_its_node(custom: client.CustomObjectsApi) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GPUNode",
        "metadata": {"name": "gpu-node-0000"},
        "spec": {"nodeName": "gpu-node-0001"},
    }
    with pytest.raises(client.ApiException) as caught:
        custom.create_cluster_custom_object(GROUP, VERSION, "gpunodes", body)
    assert "spec.nodeName must equal metadata.name" in caught.value.body


def test_minimal_policy_is_stored_with_every_default(custom: client.CustomObjectsApi) -> None:
    name = f"defaults-{uuid.uuid4().hex[:8]}"
    stored = custom.create_cluster_custom_object(
        GROUP, VERSION, "gpuhealthpolicies", {**VALID_POLICY, "metadata": {"name": name}}
    )
    try:
        spec = stored["spec"]
        assert spec["safety"]["maxConcurrentDrains"] == 1
        assert spec["safety"]["drain"]["onTimeout"] == "escalate"
        assert [s["action"] for s in spec["remediation"]["ladders"]["fatal"]] == [
            "reset-gpu",
            "reboot",
            "retire",
        ]
        assert spec["validation"]["burnInOnJoin"] is True
        assert spec["validation"]["periodic"] == {
            "enabled": False,
            "interval": "1h",
            "maxConcurrent": "5%",
            "suite": "quick",
        }
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, "gpuhealthpolicies", name)


def test_the_example_policy_is_accepted(custom: client.CustomObjectsApi) -> None:
    example = yaml.safe_load(Path("examples/gpuhealthpolicy.yaml").read_text())
    example["metadata"]["name"] = f"example-{uuid.uuid4().hex[:8]}"
    stored = custom.create_cluster_custom_object(GROUP, VERSION, "gpuhealthpolicies", example)
    try:
        assert stored["spec"]["validation"]["periodic"]["enabled"] is True
    finally:
        custom.delete_cluster_custom_object(
            GROUP, VERSION, "gpuhealthpolicies", example["metadata"]["name"]
        )


def test_crds_are_established_with_short_names(
    api_client: client.ApiClient, crds: list[str]
) -> None:
    extensions = client.ApiextensionsV1Api(api_client)
    short = {
        name: extensions.read_custom_resource_definition(name).spec.names.short_names
        for name in crds
    }
    assert short == {
        "gpuhealthpolicies.pitcrew.dev": ["ghp"],
        "gpunodes.pitcrew.dev": ["gpun"],
        "validationruns.pitcrew.dev": ["vrun"],
        "maintenancewindows.pitcrew.dev": ["mw"],
    }

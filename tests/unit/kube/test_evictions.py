"""What an eviction refusal says: the PodDisruptionBudget by name."""

from __future__ import annotations

import json

from kubernetes import client

from pitcrew.kube.evictions import budget_name

# The body kube-apiserver answers a PDB-refused eviction with
# (pkg/registry/core/pod/storage/eviction.go: createTooManyRequestsError and the
# "The disruption budget %s needs %d healthy pods and has %d currently" cause).
REFUSED = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": "Cannot evict pod as it would violate the pod's disruption budget.",
    "reason": "TooManyRequests",
    "details": {
        "causes": [
            {
                "reason": "DisruptionBudget",
                "message": "The disruption budget guarded needs 1 healthy pods and has 1 currently",
            }
        ]
    },
    "code": 429,
}


def refusal(body: dict[str, object]) -> client.ApiException:
    error = client.ApiException(status=429, reason="Too Many Requests")
    error.body = json.dumps(body)
    return error


def test_the_refusing_budget_is_named_with_its_namespace() -> None:
    assert budget_name(refusal(REFUSED), namespace="train") == "train/guarded"


def test_a_throttling_429_names_no_budget() -> None:
    throttled = {"kind": "Status", "message": "Too many requests, please try again later."}
    assert budget_name(refusal(throttled), namespace="train") == ""

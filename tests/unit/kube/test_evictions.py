"""What an eviction refusal says: the PodDisruptionBudget by name."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from pitcrew.core.views import PodView
from pitcrew.kube import evictions
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


def test_a_forced_drain_gives_pods_already_terminating_no_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pod stuck Terminating (a dead kubelet never confirms) had its grace period: a
    second delete with the same period changes nothing, grace 0 removes it."""
    deletes: list[tuple[str, int]] = []

    class Core:
        def __init__(self, api: object) -> None:
            pass

        def delete_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> None:
            deletes.append((name, kwargs["grace_period_seconds"]))

    monkeypatch.setattr(evictions.client, "CoreV1Api", Core)
    running = PodView(namespace="train", name="running", grace_seconds=45)
    stuck = PodView(namespace="train", name="stuck", grace_seconds=45, terminating=True)
    deleted = evictions.force_delete(client.ApiClient(), [running, stuck])
    assert deleted == ["train/running", "train/stuck"]
    assert deletes == [("running", 45), ("stuck", 0)]


def test_a_delete_at_once_gives_at_most_its_grace_and_none_to_a_stuck_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deletes: list[tuple[str, int]] = []

    class Core:
        def __init__(self, api: object) -> None:
            pass

        def delete_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> None:
            deletes.append((name, kwargs["grace_period_seconds"]))

    monkeypatch.setattr(evictions.client, "CoreV1Api", Core)
    slow = PodView(namespace="train", name="slow", grace_seconds=600)
    quick = PodView(namespace="train", name="quick", grace_seconds=0)
    stuck = PodView(namespace="train", name="stuck", grace_seconds=600, terminating=True)
    evictions.force_delete(client.ApiClient(), [slow, quick, stuck], grace_seconds=1)
    assert deletes == [("slow", 1), ("quick", 0), ("stuck", 0)]

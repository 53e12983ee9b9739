"""The toleration added to a job's pending pod: an addition only, guarded by its version."""

from __future__ import annotations

from typing import Any

from pitcrew.api.vocabulary import RESERVED_TAINT
from pitcrew.kube.tolerations import patch, toleration

NOT_READY = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}


def pending(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "trainer-1", "namespace": "train", "resourceVersion": "41"},
        "spec": {"containers": [{"name": "train"}], **spec},
        "status": {"phase": "Pending"},
    }


def test_the_toleration_is_appended_to_the_pods_own_behind_a_test_of_its_version() -> None:
    ops = patch(pending(tolerations=[NOT_READY]), taint=RESERVED_TAINT, value="train.llm")
    assert ops == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
        {
            "op": "add",
            "path": "/spec/tolerations",
            "value": [
                NOT_READY,
                {
                    "key": RESERVED_TAINT,
                    "operator": "Equal",
                    "value": "train.llm",
                    "effect": "NoSchedule",
                },
            ],
        },
    ]


def test_a_pod_bound_or_tolerating_already_is_left_alone() -> None:
    wanted = toleration(RESERVED_TAINT, "train.llm")
    assert patch(pending(nodeName="n0"), taint=RESERVED_TAINT, value="train.llm") is None
    assert patch(pending(tolerations=[wanted]), taint=RESERVED_TAINT, value="train.llm") is None
    running = {**pending(), "status": {"phase": "Running"}}
    assert patch(running, taint=RESERVED_TAINT, value="train.llm") is None


def test_another_jobs_toleration_does_not_count() -> None:
    other = toleration(RESERVED_TAINT, "train.other")
    ops = patch(pending(tolerations=[other]), taint=RESERVED_TAINT, value="train.llm")
    assert ops is not None
    assert ops[1]["value"] == [other, toleration(RESERVED_TAINT, "train.llm")]

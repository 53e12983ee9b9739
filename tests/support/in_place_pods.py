"""Training pods that declare, or not, an in-place restart rule (the apiserver's JSON)."""

from __future__ import annotations

import datetime
from typing import Any

from support.lifecycle_data import T0

RULE = {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [85, 86]}}


def container(*rules: dict[str, Any]) -> dict[str, Any]:
    return {"name": "train", "restartPolicy": "Never", "restartPolicyRules": list(rules)}


def training_pod(
    name: str,
    node_name: str,
    *,
    rules: tuple[dict[str, Any], ...] = (RULE,),
    started: datetime.datetime = T0,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "train",
            "name": name,
            "uid": f"uid-{name}",
            "labels": {"jobset.sigs.k8s.io/jobset-name": "llm"},
            "annotations": annotations or {},
        },
        "spec": {
            "nodeName": node_name,
            "containers": [{**container(*rules), "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": "train", "state": {"running": {"startedAt": started.isoformat()}}}
            ],
        },
    }

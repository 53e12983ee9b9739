"""Server-side apply of whole objects, for ``pitcrew install``.

Apply, not create: running the install again brings every object to what this
version of Pitcrew ships (a new CRD schema, a new RBAC rule) and changes nothing
else, and a field someone else set on the object stays theirs. ``force`` takes
over the fields Pitcrew ships from an earlier manager (a ``kubectl apply``).
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client

from pitcrew.kube.client import request

APPLY = "application/apply-patch+yaml"
KINDS: dict[str, tuple[str, bool]] = {
    "CustomResourceDefinition": ("customresourcedefinitions", False),
    "Namespace": ("namespaces", False),
    "ServiceAccount": ("serviceaccounts", True),
    "ClusterRole": ("clusterroles", False),
    "ClusterRoleBinding": ("clusterrolebindings", False),
    "Role": ("roles", True),
    "RoleBinding": ("rolebindings", True),
    "ValidatingAdmissionPolicy": ("validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": ("validatingadmissionpolicybindings", False),
    "GPUHealthPolicy": ("gpuhealthpolicies", False),
}
"""The kinds the install applies: their resource name and whether they are namespaced."""


def path(obj: dict[str, Any]) -> str:
    """The object's own URL path."""
    plural, namespaced = KINDS[obj["kind"]]
    version = obj["apiVersion"]
    base = f"/api/{version}" if "/" not in version else f"/apis/{version}"
    meta = obj["metadata"]
    where = f"/namespaces/{meta['namespace']}" if namespaced else ""
    return f"{base}{where}/{plural}/{meta['name']}"


def apply(api: client.ApiClient, obj: dict[str, Any], *, manager: str) -> dict[str, Any]:
    return request(
        api,
        "PATCH",
        path(obj),
        body=obj,
        content_type=APPLY,
        query={"fieldManager": manager, "force": "true"},
    )


def wait_established(api: client.ApiClient, names: list[str], *, timeout: float = 30.0) -> None:
    """Until every CRD in ``names`` is served (its objects can be created)."""
    deadline = time.monotonic() + timeout
    for name in names:
        crd = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        while not _established(request(api, "GET", crd)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout:.0f}s")
            time.sleep(0.2)


def _established(crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

"""``pitcrew install``: what the Helm chart installs but the workloads, from the same code.

The CRDs (generated from the API models), the namespace, the service accounts and
least-privilege RBAC (:mod:`pitcrew.deploy.rbac`), the admission policy that
confines agents and probes to their own node (:mod:`pitcrew.deploy.admission`),
and the chart's default policy. The operator and the agents are then run by hand
(``pitcrew operator``, ``pitcrew sim-agents`` on a devcluster) or by the chart.
Applied with server-side apply, so a second run is a no-op and an upgrade's run
brings each object to what this version ships.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml
from kubernetes import client

from pitcrew.api import crdgen
from pitcrew.api.meta import GROUP, VERSION
from pitcrew.deploy import admission, rbac
from pitcrew.kube import apply

MANAGER = "pitcrew-install"
DEFAULT_POLICY_NAME = "gpu-fleet"
DEFAULT_POLICY_SPEC: dict[str, Any] = {
    "nodeSelector": {"matchLabels": {"nvidia.com/gpu.present": "true"}},
    "safety": {"maxUnhealthy": "10%", "dryRun": False},
}
"""The chart's default policy (``policy.spec`` in its values; a test holds them equal):
every node GPU Feature Discovery labels, at most a tenth of them out at once."""


def objects(namespace: str, *, policy: bool = True) -> list[dict[str, Any]]:
    """Everything to apply, in the order it must go in (CRDs before the policy)."""
    found: list[dict[str, Any]] = [crdgen.crd(model) for model in crdgen.RESOURCES]
    found.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    found += rbac.manifests(namespace)
    found += rbac.job_size_manifests(namespace)
    found += admission.manifests(namespace)
    if policy:
        found.append(
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "GPUHealthPolicy",
                "metadata": {
                    "name": DEFAULT_POLICY_NAME,
                    "labels": {"app.kubernetes.io/part-of": "pitcrew"},
                },
                "spec": DEFAULT_POLICY_SPEC,
            }
        )
    return found


def render(namespace: str, *, policy: bool = True) -> str:
    """The objects as one YAML stream (``--dry-run``)."""
    return "---\n".join(
        yaml.safe_dump(obj, sort_keys=False, width=100) for obj in objects(namespace, policy=policy)
    )


def install(
    api: client.ApiClient,
    namespace: str,
    *,
    policy: bool = True,
    log: Callable[[str], None] = lambda _: None,
) -> int:
    """Apply every object; the number applied. CRDs are waited for until served, so
    the policy (a custom resource) can follow at once."""
    everything = objects(namespace, policy=policy)
    crds = [o for o in everything if o["kind"] == "CustomResourceDefinition"]
    for obj in crds + [o for o in everything if o not in crds]:
        _apply(api, obj, log)
        if obj is crds[-1]:
            apply.wait_established(api, [c["metadata"]["name"] for c in crds])
    return len(everything)


def install_crds(api: client.ApiClient) -> list[str]:
    """Only the CRDs, served when this returns; their names."""
    crds = [crdgen.crd(model) for model in crdgen.RESOURCES]
    for crd in crds:
        _apply(api, crd, lambda _: None)
    names = [c["metadata"]["name"] for c in crds]
    apply.wait_established(api, names)
    return names


def _apply(api: client.ApiClient, obj: dict[str, Any], log: Callable[[str], None]) -> None:
    apply.apply(api, obj, manager=MANAGER)
    meta = obj["metadata"]
    where = f" in {meta['namespace']}" if "namespace" in meta else ""
    log(f"applied {obj['kind']} {meta['name']}{where}")

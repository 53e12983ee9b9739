"""``pitcrew install``: what the Helm chart installs but the workloads, from the same code.

The CRDs (generated from the API models), the namespace (labelled with the Pod
Security level its pods need, :data:`POD_SECURITY`), the service accounts and
least-privilege RBAC (:mod:`pitcrew.deploy.rbac`), the admission policies that
confine agents and probes to their own node and training jobs to their own pod
(:mod:`pitcrew.deploy.admission`; the training jobs' Role only in the namespaces
named), and the chart's default policy. ``--crds-only`` applies the CRDs alone:
the chart's pre-install and pre-upgrade hook runs it, since Helm never upgrades a
chart's CRDs. The operator and the agents are then run by hand
(``pitcrew operator``, ``pitcrew sim-agents`` on a devcluster) or by the chart.
Applied with server-side apply, so a second run is a no-op and an upgrade's run
brings each object to what this version ships.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
POD_SECURITY = {
    "pod-security.kubernetes.io/enforce": "privileged",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
"""The Pod Security level of Pitcrew's namespace: ``privileged``, because three of its
pods need more than ``baseline`` allows: the agent reads the kernel log (``/dev/kmsg``,
which only a privileged container running as root can open), a reset-gpu Job is
privileged (``nvidia-smi -r`` needs the device), and pair probes use the host's network
(its NICs, for RDMA). The operator and the CRD hook meet ``restricted``
(tests/e2e/chart)."""
TRAINING_ACCOUNTS = ["default"]
"""The ServiceAccounts of training jobs given a Role by default (the chart's
``trainingJobs.serviceAccounts``): a pod that names none runs as ``default``."""


def crds() -> list[dict[str, Any]]:
    """Pitcrew's CustomResourceDefinitions, from the API models."""
    return [crdgen.crd(model) for model in crdgen.RESOURCES]


def objects(
    namespace: str,
    *,
    policy: bool = True,
    training_namespaces: Sequence[str] = (),
    training_accounts: Sequence[str] = TRAINING_ACCOUNTS,
) -> list[dict[str, Any]]:
    """Everything to apply, in the order it must go in (CRDs before the policy)."""
    found: list[dict[str, Any]] = crds()
    found.append(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": POD_SECURITY},
        }
    )
    found += rbac.manifests(namespace)
    found += rbac.job_size_manifests(namespace)
    found += admission.manifests(namespace)
    found += admission.training_job_manifests()
    for where in training_namespaces:
        found += rbac.training_job_manifests(where, list(training_accounts))
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


def render(
    namespace: str,
    *,
    policy: bool = True,
    crds_only: bool = False,
    training_namespaces: Sequence[str] = (),
) -> str:
    """The objects as one YAML stream (``--dry-run``)."""
    chosen = (
        crds()
        if crds_only
        else objects(namespace, policy=policy, training_namespaces=training_namespaces)
    )
    return "---\n".join(yaml.safe_dump(obj, sort_keys=False, width=100) for obj in chosen)


def install(
    api: client.ApiClient,
    namespace: str,
    *,
    policy: bool = True,
    training_namespaces: Sequence[str] = (),
    log: Callable[[str], None] = lambda _: None,
) -> int:
    """Apply every object; the number applied. CRDs are waited for until served, so
    the policy (a custom resource) can follow at once."""
    everything = objects(namespace, policy=policy, training_namespaces=training_namespaces)
    crds = [o for o in everything if o["kind"] == "CustomResourceDefinition"]
    for obj in crds + [o for o in everything if o not in crds]:
        _apply(api, obj, log)
        if obj is crds[-1]:
            apply.wait_established(api, [c["metadata"]["name"] for c in crds])
    return len(everything)


def install_crds(
    api: client.ApiClient, *, log: Callable[[str], None] = lambda _: None
) -> list[str]:
    """Only the CRDs, served when this returns; their names."""
    found = crds()
    for crd in found:
        _apply(api, crd, log)
    names = [c["metadata"]["name"] for c in found]
    apply.wait_established(api, names)
    return names


def install_training_jobs(
    api: client.ApiClient,
    namespace: str,
    *,
    accounts: Sequence[str] = TRAINING_ACCOUNTS,
    log: Callable[[str], None] = lambda _: None,
) -> None:
    """The Role and RoleBinding that let ``accounts`` of one namespace report their
    training progress on their own pods (the policy that confines them comes with
    :func:`install`)."""
    for obj in rbac.training_job_manifests(namespace, list(accounts)):
        _apply(api, obj, log)


def _apply(api: client.ApiClient, obj: dict[str, Any], log: Callable[[str], None]) -> None:
    apply.apply(api, obj, manager=MANAGER)
    meta = obj["metadata"]
    where = f" in {meta['namespace']}" if "namespace" in meta else ""
    log(f"applied {obj['kind']} {meta['name']}{where}")

"""cluster-api: ask Cluster API to remediate (replace) the node's Machine.

Annotating a Machine with ``cluster.x-k8s.io/remediate-machine`` makes its
MachineHealthCheck-driven remediation (or the infrastructure provider's) replace
it. The annotation value is the decision key, so repeating it is a no-op.

**Which Machine is the node's is read from the Machines, never from the Node.**
Cluster API also writes ``cluster.x-k8s.io/machine`` and
``cluster.x-k8s.io/cluster-namespace`` on each Node, but a kubelet may rewrite its
own Node's annotations: root on a GPU node could name any Machine (a control-plane
one, another tenant's) and have Pitcrew ask for its replacement. The Machine is the
one whose ``status.nodeRef`` names this node, written by Cluster API's controller
(which finds the Node by provider ID), and it must be this Node, not an earlier one
of the same name:

- where the Machine records the Node's ``uid`` (``v1beta1`` as Cluster API before
  1.11 stores it), it must be this Node's uid;
- where it does not (``v1beta2``, Cluster API 1.11 and later, whose ``nodeRef`` is a
  name only, also when read through ``v1beta1``), the Machine's
  ``spec.providerID`` must equal the Node's (immutable once set).

The Machines must be visible to the operator: Cluster API manages this cluster from
inside it (a self-hosted management cluster). A Machine of a separate management
cluster is not found, and the rung fails with a message that says so, as it does
when the API is not served (no Cluster API, or neither ``v1beta2`` nor ``v1beta1``)
or the operator may not list Machines: the executor records the error in the node's
``status.remediation`` and the ladder goes on.
"""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client

from pitcrew.api.vocabulary import OPERATOR_MANAGER
from pitcrew.kube.client import retrying
from pitcrew.remediators.base import RemediationError, RemediationRequest

MACHINE_ANNOTATION = "cluster.x-k8s.io/machine"
"""Written on Nodes by Cluster API, and by any kubelet that wants to: named in a
refusal, never trusted."""
REMEDIATE_ANNOTATION = "cluster.x-k8s.io/remediate-machine"
GROUP, PLURAL = "cluster.x-k8s.io", "machines"
VERSIONS = ("v1beta2", "v1beta1")
"""Asked in this order: the first one the apiserver serves is read and patched."""


def runs_on(machine: dict[str, Any], node: dict[str, Any]) -> bool:
    """Whether ``machine``'s ``status.nodeRef`` is ``node`` (this Node, not an earlier
    one of its name): by uid where the Machine records one, else by provider ID."""
    meta = node.get("metadata") or {}
    ref = (machine.get("status") or {}).get("nodeRef") or {}
    if not meta.get("name") or ref.get("name") != meta.get("name"):
        return False
    if ref.get("uid"):
        return bool(ref["uid"] == meta.get("uid"))
    provider = (machine.get("spec") or {}).get("providerID")
    return bool(provider) and provider == (node.get("spec") or {}).get("providerID")


def machine_name(machine: dict[str, Any]) -> str:
    meta = machine.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class ClusterApi:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    def start(self, request: RemediationRequest) -> str:
        version, machines = self._machines()
        mine = [m for m in machines if runs_on(m, request.node_object)]
        if not mine:
            raise RemediationError(self._none_found(request, version))
        if len(mine) > 1:
            names = ", ".join(sorted(machine_name(m) for m in mine))
            raise RemediationError(
                f"Machines {names} all name node {request.node} in status.nodeRef: "
                "no Machine was annotated"
            )
        meta = mine[0]["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        try:
            retrying(client.CustomObjectsApi(self.api).patch_namespaced_custom_object)(
                GROUP,
                version,
                namespace,
                PLURAL,
                name,
                {"metadata": {"annotations": {REMEDIATE_ANNOTATION: request.key}}},
                field_manager=OPERATOR_MANAGER,
                _content_type="application/merge-patch+json",
            )
        except client.ApiException as error:
            raise RemediationError(
                f"cannot annotate Machine {namespace}/{name}: {error.status} {error.reason}"
            ) from None
        return f"annotated Machine {namespace}/{name} for remediation"

    def _machines(self) -> tuple[str, list[dict[str, Any]]]:
        """Every Machine, from the first served version of :data:`VERSIONS`."""
        custom = client.CustomObjectsApi(self.api)
        for version in VERSIONS:
            try:
                listed = retrying(custom.list_cluster_custom_object)(GROUP, version, PLURAL)
            except client.ApiException as error:
                if error.status == 404:
                    continue  # this version is not served: the next one
                if error.status == 403:
                    raise RemediationError(
                        "the operator may not list Cluster API Machines (403 Forbidden): "
                        f"grant list on {PLURAL}.{GROUP} (the chart's role does); no Machine "
                        "was annotated"
                    ) from None
                raise RemediationError(
                    f"cannot list Cluster API Machines ({GROUP}/{version}): "
                    f"{error.status} {error.reason}"
                ) from None
            return version, list(cast(dict[str, Any], listed).get("items") or [])
        raise RemediationError(
            f"this cluster serves no Cluster API Machines ({PLURAL}.{GROUP} "
            f"{' or '.join(VERSIONS)}): the cluster-api rung needs Cluster API to manage "
            "this cluster from inside it (self-hosted); no Machine was annotated"
        )

    @staticmethod
    def _none_found(request: RemediationRequest, version: str) -> str:
        annotations = (request.node_object.get("metadata") or {}).get("annotations") or {}
        claimed = annotations.get(MACHINE_ANNOTATION)
        said = (
            f"; the Node's own {MACHINE_ANNOTATION} annotation ({claimed}) is not trusted"
            if claimed
            else ""
        )
        return (
            f"no Cluster API Machine ({GROUP}/{version}) has node {request.node} (this Node's "
            "uid or provider ID) in status.nodeRef: a Machine of a management cluster "
            f"outside this one is not visible to the operator{said}; no Machine was annotated"
        )

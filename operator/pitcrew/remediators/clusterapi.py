"""cluster-api: ask Cluster API to remediate (replace) the node's Machine.

Cluster API marks each Node with ``cluster.x-k8s.io/machine`` and
``cluster.x-k8s.io/cluster-namespace``; annotating that Machine with
``cluster.x-k8s.io/remediate-machine`` makes its MachineHealthCheck-driven
remediation (or the infrastructure provider's) replace it. The annotation
value is the decision key, so repeating it is a no-op.
"""

from __future__ import annotations

from kubernetes import client

from pitcrew.api.vocabulary import OPERATOR_MANAGER
from pitcrew.kube.client import retrying
from pitcrew.remediators.base import RemediationError, RemediationRequest

MACHINE_ANNOTATION = "cluster.x-k8s.io/machine"
NAMESPACE_ANNOTATION = "cluster.x-k8s.io/cluster-namespace"
REMEDIATE_ANNOTATION = "cluster.x-k8s.io/remediate-machine"
GROUP, VERSION, PLURAL = "cluster.x-k8s.io", "v1beta1", "machines"


class ClusterApi:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    def start(self, request: RemediationRequest) -> str:
        annotations = request.node_object.get("metadata", {}).get("annotations") or {}
        machine = annotations.get(MACHINE_ANNOTATION)
        namespace = annotations.get(NAMESPACE_ANNOTATION)
        if not machine or not namespace:
            raise RemediationError(
                f"node {request.node} is not a Cluster API machine (no "
                f"{MACHINE_ANNOTATION} / {NAMESPACE_ANNOTATION})"
            )
        try:
            retrying(client.CustomObjectsApi(self.api).patch_namespaced_custom_object)(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                machine,
                {"metadata": {"annotations": {REMEDIATE_ANNOTATION: request.key}}},
                field_manager=OPERATOR_MANAGER,
                _content_type="application/merge-patch+json",
            )
        except client.ApiException as error:
            raise RemediationError(
                f"cannot annotate Machine {namespace}/{machine}: {error.status} {error.reason}"
            ) from None
        return f"annotated Machine {namespace}/{machine} for remediation"

"""The Kubernetes API behind the shell's ``Cluster`` port.

One object with the few writes the operator makes, each delegating to the
adapter module that knows its API (node edits guarded by resourceVersion,
evictions with backoff, Jobs, server-side apply of status), so the shell's
collaborators can be swapped for fakes in unit tests.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any, cast

from kubernetes import client

from pitcrew.api.meta import API_VERSION, GROUP, VERSION
from pitcrew.api.policy import GPUHealthPolicy
from pitcrew.api.vocabulary import OPERATOR_MANAGER, PRE_PULL_MANAGER
from pitcrew.core.node_edits import NodeAction
from pitcrew.core.port_types import Backoff, EvictionResult
from pitcrew.core.views import PodView
from pitcrew.kube import evictions, gpunodes, jobs, nodes, prepull, restarts, tolerations
from pitcrew.kube.client import list_all, retrying

Object = dict[str, Any]
LIST_PATHS = {
    "node": "/api/v1/nodes",
    "pod": "/api/v1/pods",
    "gpunode": f"/apis/{GROUP}/{VERSION}/gpunodes",
    "policy": f"/apis/{GROUP}/{VERSION}/{GPUHealthPolicy.PLURAL}",
    "run": f"/apis/{GROUP}/{VERSION}/validationruns",
}


class KubeCluster:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    def list_objects(self, kind: str) -> list[Object]:
        """A paginated list (500 a page), retried on transient errors."""
        return list_all(self.api, LIST_PATHS[kind])

    def ensure_gpunode(self, *, node: str, node_uid: str) -> Object | None:
        return gpunodes.ensure(self.api, node=node, node_uid=node_uid)

    def edit_node(
        self, node: str, action: NodeAction, *, known: Object | None = None
    ) -> Object | None:
        return nodes.apply_action(self.api, node, action, known=known)

    def annotate_node(self, node: str, annotations: dict[str, str | None]) -> None:
        nodes.annotate(self.api, node, annotations)

    def evict(
        self,
        pods: Iterable[PodView],
        *,
        backoff: Backoff,
        now: datetime.datetime,
        parallelism: int,
    ) -> EvictionResult:
        return evictions.evict(self.api, pods, backoff=backoff, now=now, parallelism=parallelism)

    def force_delete(
        self, pods: Iterable[PodView], *, grace_seconds: int | None = None
    ) -> list[str]:
        return evictions.force_delete(self.api, pods, grace_seconds=grace_seconds)

    def tolerate(self, pods: Iterable[PodView], *, taint: str, value: str) -> list[str]:
        return tolerations.tolerate(self.api, pods, taint=taint, value=value)

    def request_restart(self, pods: Iterable[tuple[str, str, str]], *, value: str) -> list[str]:
        return restarts.request_restart(self.api, pods, value=value)

    def create_job(self, job: Object) -> bool:
        return jobs.create(self.api, job)

    def delete_job(self, *, namespace: str, name: str) -> bool:
        return jobs.delete(self.api, namespace=namespace, name=name)

    def apply_gpunode_status(self, *, node: str, status: Object) -> Object:
        return gpunodes.apply_status(self.api, node=node, status=status, manager=OPERATOR_MANAGER)

    def apply_gpunode_images(self, *, node: str, images: list[str]) -> Object:
        return gpunodes.apply_status(
            self.api, node=node, status={"images": images}, manager=PRE_PULL_MANAGER
        )

    def read_node(self, name: str) -> Object | None:
        return nodes.read(self.api, name)

    def create_pod(self, pod: Object) -> bool:
        return prepull.create(self.api, pod)

    def delete_pod(self, *, namespace: str, name: str) -> bool:
        return prepull.delete(self.api, namespace=namespace, name=name)

    def publish_checks(self, *, node: str, checks: Object) -> Object:
        return gpunodes.apply_checks(self.api, node=node, checks=checks, manager=OPERATOR_MANAGER)

    def apply_policy_status(self, *, name: str, status: Object) -> Object:
        body = {
            "apiVersion": API_VERSION,
            "kind": GPUHealthPolicy.KIND,
            "metadata": {"name": name},
            "status": status,
        }
        written = retrying(client.CustomObjectsApi(self.api).patch_cluster_custom_object_status)(
            GROUP,
            VERSION,
            GPUHealthPolicy.PLURAL,
            name,
            body,
            field_manager=OPERATOR_MANAGER,
            force=True,
            _content_type=gpunodes.APPLY,
        )
        return cast(Object, written)

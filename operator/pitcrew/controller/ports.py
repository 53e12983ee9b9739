"""What the shell needs from the world, as protocols.

The round loop, the executor and the policy-status writer talk to the
cluster only through :class:`Cluster` and post Events only through
:class:`EventSink`. In production both are backed by the Kubernetes API
(:class:`pitcrew.kube.cluster.KubeCluster`, :class:`pitcrew.kube.events.Recorder`);
the unit tests pass fakes that record every call, so the shell's own logic
(sequential decisions, plans in flight, dry run, the breaker's Events) is
tested without an apiserver, as medik8s' NHC and kwok test theirs.

The values these calls take and return (:class:`~pitcrew.core.port_types.Ref`,
:class:`~pitcrew.core.port_types.EvictionResult`, ...) are the ports' own, in
:mod:`pitcrew.core.port_types`: below this layer and the adapters', so that neither
the protocols nor the fakes depend on an adapter to say what they mean.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any, Protocol

from pitcrew.core.node_edits import NodeAction
from pitcrew.core.port_types import Backoff, EvictionResult, Ref
from pitcrew.core.views import PodView

Object = dict[str, Any]


class Cluster(Protocol):
    def list_objects(self, kind: str) -> list[Object]:
        """Every object of one watched kind (node, pod, gpunode, policy, run)."""
        ...

    def ensure_gpunode(self, *, node: str, node_uid: str) -> Object | None:
        """Create the GPUNode for ``node``; the new object, or None when it exists."""
        ...

    def edit_node(
        self, node: str, action: NodeAction, *, known: Object | None = None
    ) -> Object | None:
        """Apply a node edit, computed first from ``known`` (the Node as last watched)
        when given; the patched Node, or None when nothing had to change."""
        ...

    def annotate_node(self, node: str, annotations: dict[str, str | None]) -> None: ...

    def evict(
        self,
        pods: Iterable[PodView],
        *,
        backoff: Backoff,
        now: datetime.datetime,
        parallelism: int,
    ) -> EvictionResult: ...

    def force_delete(
        self, pods: Iterable[PodView], *, grace_seconds: int | None = None
    ) -> list[str]: ...

    def tolerate(self, pods: Iterable[PodView], *, taint: str, value: str) -> list[str]:
        """Add the toleration of ``taint=value:NoSchedule`` to each of ``pods`` still
        pending on no node; the keys of the pods changed."""
        ...

    def request_restart(self, pods: Iterable[tuple[str, str, str]], *, value: str) -> list[str]:
        """Ask each pod, given as (namespace, name, UID), to restart in place
        (``pitcrew.dev/restart-requested: value``); the keys of the pods asked."""
        ...

    def create_job(self, job: Object) -> bool:
        """Create a Job; False when it already exists."""
        ...

    def delete_job(self, *, namespace: str, name: str) -> bool:
        """Delete a Job and its pods; False when it does not exist."""
        ...

    def apply_gpunode_status(self, *, node: str, status: Object) -> Object:
        """Server-side apply the operator's fields of a GPUNode status; the object."""
        ...

    def apply_policy_status(self, *, name: str, status: Object) -> Object:
        """Server-side apply a GPUHealthPolicy status; the object."""
        ...

    def publish_checks(self, *, node: str, checks: Object) -> Object:
        """Server-side apply ``spec.checks`` of a GPUNode (what its agent runs); the object."""
        ...


class EventSink(Protocol):
    def emit(self, ref: Ref, *, reason: str, message: str, warning: bool = False) -> None: ...


class PullCluster(Protocol):
    """What the pre-pull loop (:mod:`pitcrew.controller.prepull`) needs of the cluster."""

    def read_node(self, name: str) -> Object | None:
        """The whole Node (with ``status.images``, which the watch cache drops); None
        when it is gone."""
        ...

    def create_pod(self, pod: Object) -> bool:
        """Create a pod; False when it exists already."""
        ...

    def delete_pod(self, *, namespace: str, name: str) -> bool:
        """Delete a pod; False when it is gone already."""
        ...

    def apply_gpunode_images(self, *, node: str, images: list[str]) -> Object:
        """Server-side apply ``status.images`` of a GPUNode (its own field manager)."""
        ...


class Leadership(Protocol):
    """Which shards this process leads now (:mod:`pitcrew.controller.leader`): a pool
    is decided and acted on, and the cluster-wide work done, only by the replica that
    holds its Lease within its tenure."""

    def leads_pool(self, policy: str) -> bool: ...

    def leads_cluster(self) -> bool: ...

    def campaign(self, pools: Iterable[str]) -> None:
        """The pools there are now: a Lease is campaigned for each."""


class Alone:
    """No election (``leader.election`` off, one replica): every shard is this
    process's."""

    def leads_pool(self, policy: str) -> bool:
        return True

    def leads_cluster(self) -> bool:
        return True

    def campaign(self, pools: Iterable[str]) -> None:
        """Nothing to campaign for."""

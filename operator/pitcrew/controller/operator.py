"""kopf wiring: watch events into the reconciler's store, and the operator's runtime.

Nodes and Pods are only *watched* (``on.event``): kopf writes nothing onto
them (no finalizers, no progress annotations), so Pitcrew's only writes to a
Node are its deliberate cordons, taints and annotations. GPUNodes and
policies are watched the same way; the reconciler writes their status itself
by server-side apply. All handlers are async and only update memory, so a
burst of thousands of events costs microseconds each.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import kopf
from prometheus_client import start_http_server

from pitcrew.api.meta import GROUP, VERSION
from pitcrew.controller import health, metrics
from pitcrew.controller.leader import wait_for_leadership
from pitcrew.controller.reconciler import Reconciler, utc_now
from pitcrew.controller.settings import OperatorSettings
from pitcrew.kube.client import api_client, use_as_default

logger = logging.getLogger(__name__)


def register(registry: kopf.OperatorRegistry, reconciler: Reconciler) -> None:
    tasks: list[asyncio.Task[None]] = []  # held: the loop keeps only weak references

    def watch(group: str, version: str, plural: str, kind: str) -> None:
        @kopf.on.event(group, version, plural, registry=registry)
        async def handler(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
            reconciler.observe(kind, dict(body), deleted=event.get("type") == "DELETED")

    watch("", "v1", "nodes", "node")
    watch("", "v1", "pods", "pod")
    watch(GROUP, VERSION, "gpunodes", "gpunode")
    watch(GROUP, VERSION, "gpuhealthpolicies", "policy")
    watch(GROUP, VERSION, "validationruns", "run")

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False  # Pitcrew posts its own Events
        # The resources are known; scanning CRDs would need RBAC on CRDs cluster-wide.
        settings.scanning.disabled = True
        settings.watching.server_timeout = 300
        settings.networking.request_timeout = 60
        loop = asyncio.get_running_loop()
        tasks.extend([loop.create_task(reconciler.run()), loop.create_task(reconciler.account())])

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> Any:
        try:
            return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
        except kopf.LoginError:
            return kopf.login_with_kubeconfig(**kwargs)


def run(settings: OperatorSettings) -> None:
    """Run the operator until stopped: health and metrics first (standbys serve them
    too), then leader election, then kopf."""
    if settings.kubeconfig:
        os.environ["KUBECONFIG"] = settings.kubeconfig
    api = api_client(settings.kubeconfig)
    use_as_default(api)
    leading: list[Reconciler] = []

    def live() -> str | None:
        if not leading:
            return None  # a standby waiting for the Lease is healthy
        reconciler = leading[0]
        return health.leader_check(
            last_round=lambda: reconciler.last_round_at,
            last_event=lambda: reconciler.last_gpunode_event,
            watched_objects=lambda: len(reconciler.store.gpunodes),
            resync_seconds=settings.resync_seconds,
            watch_stale_seconds=settings.watch_stale_seconds,
            clock=utc_now,
        )

    if settings.health_port:
        health.serve(settings.health_port, live=live)
    metrics.LEADER.set(0)
    if settings.metrics_port:
        start_http_server(settings.metrics_port)
    if settings.leader_election:
        wait_for_leadership(
            name=settings.lease_name,
            namespace=settings.namespace,
            identity=settings.identity,
            lease_seconds=settings.lease_seconds,
        )
    metrics.LEADER.set(1)
    reconciler = Reconciler(api, settings)
    leading.append(reconciler)
    registry = kopf.OperatorRegistry()
    register(registry, reconciler)
    kopf.run(registry=registry, clusterwide=True, standalone=True)

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
import datetime
import logging
import os
from typing import Any

import kopf
from prometheus_client import start_http_server

from pitcrew import metrics
from pitcrew.api.meta import GROUP, VERSION
from pitcrew.kube.client import api_client, use_as_default
from pitcrew.leader import wait_for_leadership
from pitcrew.reconciler import Reconciler
from pitcrew.settings import OperatorSettings

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

    @kopf.on.probe(id="reconcile-loop", registry=registry)
    def reconcile_loop(**_: Any) -> str:
        age = datetime.datetime.now(datetime.UTC) - reconciler.last_round_at
        limit = datetime.timedelta(seconds=reconciler.settings.resync_seconds * 4)
        if age > limit:
            raise kopf.PermanentError(f"no reconcile round for {age}: the loop is stuck")
        return f"last round {age.total_seconds():.0f}s ago"


def run(settings: OperatorSettings) -> None:
    """Run the operator until stopped: leader election first, then kopf."""
    if settings.kubeconfig:
        os.environ["KUBECONFIG"] = settings.kubeconfig
    api = api_client(settings.kubeconfig)
    use_as_default(api)
    if settings.leader_election:
        wait_for_leadership(
            name=settings.lease_name,
            namespace=settings.namespace,
            identity=settings.identity,
            lease_seconds=settings.lease_seconds,
        )
    metrics.LEADER.set(1)
    if settings.metrics_port:
        start_http_server(settings.metrics_port)
    reconciler = Reconciler(api, settings)
    registry = kopf.OperatorRegistry()
    register(registry, reconciler)
    liveness = f"http://0.0.0.0:{settings.health_port}/healthz" if settings.health_port else None
    kopf.run(registry=registry, clusterwide=True, standalone=True, liveness_endpoint=liveness)

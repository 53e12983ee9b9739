"""The operator process: health and metrics, the election of its shards, the shell's
wiring, kopf.

Every replica watches the whole cluster and runs the round loop; it decides and
acts only for the shards whose Lease it holds (:mod:`pitcrew.controller.leader`,
design 017): the pools it leads, and the cluster-wide work when it holds the
cluster shard. A shard taken over is decided at once from a warm cache.

Nodes, Pods and GPUNodes, the hot streams, are watched raw
(:mod:`pitcrew.kube.watches`, one thread each): every object parsed once from
its JSON line and observed on the event loop, without kopf's per-event
machinery. Policies, ValidationRuns, windows and budgets, whose events are
rare, are watched by kopf (``on.event``). Nothing writes onto a watched
object as a side effect (no finalizers, no progress annotations), so
Pitcrew's only writes to a Node are its deliberate cordons, taints and
annotations; the shell writes statuses itself by server-side apply. The
handlers only update memory.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import kopf
from kopf._core.engines.peering import Identity  # kopf.run's type for it, not re-exported
from kubernetes import client

from pitcrew.api.meta import API_VERSION, GROUP, VERSION
from pitcrew.api.policy import GPUHealthPolicy
from pitcrew.api.vocabulary import account_name
from pitcrew.controller import health, metrics
from pitcrew.controller.accountant import Accountant
from pitcrew.controller.executor import Executor
from pitcrew.controller.hangs import HangWatch, Restarter
from pitcrew.controller.job_sizes import JobSizes, fetcher
from pitcrew.controller.job_sizes import discovery as job_size_discovery
from pitcrew.controller.lanes import Lanes
from pitcrew.controller.leader import Elector, run_until_it_ends
from pitcrew.controller.maintenance import NodeMaintenances, discovery, lister
from pitcrew.controller.policy_status import PolicyStatusWriter
from pitcrew.controller.ports import Alone, Leadership
from pitcrew.controller.prepull import INTERVAL as PRE_PULL_INTERVAL
from pitcrew.controller.prepull import PrePuller
from pitcrew.controller.rounds import RoundLoop
from pitcrew.controller.runs import Runs
from pitcrew.controller.settings import OperatorSettings, identity, job_pods
from pitcrew.controller.slurm import SlurmWatch
from pitcrew.controller.store import Store
from pitcrew.core.convert import object_key
from pitcrew.core.lease import Timing
from pitcrew.core.port_types import Ref
from pitcrew.kube import evictions, watches
from pitcrew.kube.client import api_client, load_configuration, use_as_default
from pitcrew.kube.cluster import LIST_PATHS, KubeCluster
from pitcrew.kube.events import Recorder, pod_ref
from pitcrew.remediators.registry import remediators
from pitcrew.slurm.control import Slurm

logger = logging.getLogger(__name__)


def build(
    api: client.ApiClient,
    settings: OperatorSettings,
    *,
    leadership: Leadership | None = None,
) -> Shell:
    """The shell with its real collaborators: the Kubernetes API, Events, remediators;
    acting for the shards ``leadership`` says this replica leads (all, without one)."""
    leads = leadership or Alone()
    store = Store()
    cluster = KubeCluster(api)
    pool = Lanes(settings.rounds.workers)
    events = Recorder(api, hold=pool.wait_first)

    def flag(pod: dict[str, Any], *, reason: str, message: str) -> None:
        if not leads.leads_cluster():
            return  # the cluster shard's holder says it
        meta = pod.get("metadata") or {}
        ref = pod_ref(meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", ""))
        events.emit(ref, reason=reason, message=message, warning=True)

    holder: list[RoundLoop] = []

    def requeue(node: str, seconds: float) -> None:
        holder[0].requeue(node, seconds)

    def wake(nodes: Iterable[str]) -> None:
        holder[0].mark(nodes)

    slurm = slurm_watch(settings, wake)

    def publish(items: dict[str, dict[str, Any]]) -> None:
        store.node_maintenances = items

    def report(problem: str) -> None:
        store.maintenance_problem = problem

    node_maintenances = NodeMaintenances(
        lister(api), publish=publish, wake=wake, served=discovery(api), report=report
    )
    threading.Thread(
        target=node_maintenances.run,
        args=(threading.Event(),),
        daemon=True,
        name="pitcrew-node-maintenance",
    ).start()

    def report_sizes(problem: str) -> None:
        store.job_size_problem = problem

    sizes = JobSizes(
        fetcher(api),
        ThreadPoolExecutor(max_workers=2, thread_name_prefix="pitcrew-sizes"),
        served=job_size_discovery(api),
        report=report_sizes,
    )
    restarter = Restarter(
        delete=functools.partial(evictions.delete_exact, api),
        emit=events.emit,
        pool=ThreadPoolExecutor(max_workers=2, thread_name_prefix="pitcrew-hangs"),
    )
    accountant = Accountant(
        store,
        now=utc_now(),
        max_jobs=settings.metrics.max_jobs,
        flag=flag,
        wake=wake,
        sizes=sizes.get,
        hangs=HangWatch(
            store, restart=restarter, dry_run=settings.dry_run, leading=leads.leads_pool
        ),
    )

    executor = Executor(
        cluster=cluster,
        store=store,
        events=events,
        remediators=remediators(
            api,
            namespace=settings.namespace,
            reset_image=settings.jobs.remediation_image,
            reset_account=account_name("remediation", settings.jobs.account_prefix),
            pods=job_pods(settings.jobs),
        ),
        remediation_pool=ThreadPoolExecutor(max_workers=8, thread_name_prefix="pitcrew-remediate"),
        settings=settings,
        clock=utc_now,
        requeue=requeue,
        leading=leads.leads_pool,
        slurm=slurm,
    )
    rounds = RoundLoop(
        store=store,
        cluster=cluster,
        executor=executor,
        policy_status=PolicyStatusWriter(
            cluster=cluster, store=store, events=events, goodput=accountant.goodput
        ),
        runs=Runs(api, store, settings, events),
        pool=pool,
        settings=settings,
        clock=utc_now,
        slurm=slurm,
        leadership=leads,
    )
    holder.append(rounds)
    pre_puller = PrePuller(store=store, cluster=cluster, events=events, leading=leads.leads_pool)
    return Shell(
        rounds=rounds,
        accountant=accountant,
        pre_puller=pre_puller,
        settings=settings,
        api=api,
        events=events,
    )


def slurm_watch(
    settings: OperatorSettings, wake: Callable[[Iterable[str]], None]
) -> SlurmWatch | None:
    """Slurm's nodes, read on a thread of their own, when the operator has Slurm's client."""
    if not settings.slurm.scontrol:
        return None
    watch = SlurmWatch(
        Slurm.beside(settings.slurm.scontrol),
        interval=settings.slurm.interval.total_seconds(),
        wake=wake,
    )
    threading.Thread(
        target=watch.run, args=(threading.Event(),), daemon=True, name="pitcrew-slurm"
    ).start()
    return watch


@dataclass(frozen=True)
class Shell:
    rounds: RoundLoop
    accountant: Accountant
    pre_puller: PrePuller
    settings: OperatorSettings
    api: client.ApiClient
    events: Recorder

    async def account(self) -> None:
        """Feed GPU-time and job-time metrics from the cache, every few seconds."""
        while True:
            await asyncio.sleep(self.settings.metrics.accounting_interval.total_seconds())
            try:
                self.accountant.tick(utc_now())
            except Exception:
                metrics.RECONCILE_ERRORS.inc()
                logger.exception("accounting failed; retried on the next tick")

    async def pre_pull(self) -> None:
        """Pull the pool's training images onto its idle spares (:mod:`.prepull`): the
        cache read here, on the loop that feeds it; the API calls on a thread."""
        while True:
            await asyncio.sleep(PRE_PULL_INTERVAL)
            try:
                snapshot = self.pre_puller.snapshot()
                await asyncio.to_thread(self.pre_puller.act, snapshot)
            except Exception:
                metrics.RECONCILE_ERRORS.inc()
                logger.exception("pre-pull pass failed; retried on the next pass")


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


HOT = ("node", "pod", "gpunode")
"""The kinds watched raw (:mod:`pitcrew.kube.watches`), not by kopf."""


def hot_watches(shell: Shell, loop: asyncio.AbstractEventLoop) -> None:
    """A thread per hot kind, watching it raw; what it finds is observed on the loop,
    in the order it came."""
    rounds = shell.rounds
    for kind in HOT:

        def listed(items: list[dict[str, Any]], kind: str = kind) -> None:
            for obj in items:
                loop.call_soon_threadsafe(rounds.observe, kind, obj)
            keys = {object_key(o) if kind == "pod" else o["metadata"]["name"] for o in items}
            loop.call_soon_threadsafe(rounds.relisted, kind, keys)

        def changed(obj: dict[str, Any], deleted: bool, kind: str = kind) -> None:
            loop.call_soon_threadsafe(functools.partial(rounds.observe, kind, obj, deleted=deleted))

        threading.Thread(
            target=watches.follow,
            args=(shell.api, LIST_PATHS[kind]),
            kwargs={"listed": listed, "changed": changed, "stop": threading.Event()},
            daemon=True,
            name=f"pitcrew-watch-{kind}",
        ).start()


def register(registry: kopf.OperatorRegistry, shell: Shell) -> None:
    tasks: list[asyncio.Task[None]] = []  # held: the loop keeps only weak references

    def watch(group: str, version: str, plural: str, kind: str) -> None:
        @kopf.on.event(group, version, plural, registry=registry)
        async def handler(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
            shell.rounds.observe(kind, dict(body), deleted=event.get("type") == "DELETED")

    # Nodes, Pods and GPUNodes are the hot streams: raw watches (hot_watches), not kopf.
    watch(GROUP, VERSION, "gpuhealthpolicies", "policy")
    watch(GROUP, VERSION, "validationruns", "run")
    watch(GROUP, VERSION, "maintenancewindows", "window")
    watch("policy", "v1", "poddisruptionbudgets", "pdb")

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False  # Pitcrew posts its own Events
        # The resources are known; scanning CRDs would need RBAC on CRDs cluster-wide.
        settings.scanning.disabled = True
        settings.watching.server_timeout = 300
        # Initial lists a page at a time (kopf lists everything in one answer by
        # default: 10,000 Nodes at once hold the apiserver's memory and ours).
        settings.watching.chunk_size = 500
        # A worker per object lives this long after its last event, holding that
        # event (the whole object): kopf's 5 s default keeps five seconds' worth of
        # the initial lists' objects in memory beside the store's slim copies.
        settings.queueing.idle_timeout = 1.0
        settings.networking.request_timeout = 60
        loop = asyncio.get_running_loop()
        hot_watches(shell, loop)
        tasks.extend(
            [
                loop.create_task(shell.rounds.run()),
                loop.create_task(shell.account()),
                loop.create_task(shell.pre_pull()),
            ]
        )

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        # Read again at each login: kopf logs in again after a 401, as when the
        # kubelet has rotated the pod's bound token.
        return connection(load_configuration(shell.settings.kubeconfig))


def connection(configuration: client.Configuration) -> kopf.ConnectionInfo:
    """kopf's connection to the apiserver: the one the operator's own client has.

    kopf's own in-pod login names the apiserver ``https://kubernetes.default.svc``,
    a name that only cluster DNS resolves; the client's is ``$KUBERNETES_SERVICE_HOST``
    (:func:`~pitcrew.kube.client.load_configuration`). With kopf's, the operator pod on
    a cluster without DNS (the devcluster's real node) failed every kopf request on the
    name and took no node out. The operator that takes broken nodes out must not
    depend on cluster DNS, and its two halves must reach the apiserver the same way."""
    scheme, _, token = (configuration.get_api_key_with_prefix("BearerToken") or "").rpartition(" ")
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        scheme=scheme or None,
        token=token or None,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
    )


def run(settings: OperatorSettings) -> None:
    """Run the operator until stopped: health and metrics, the shell (every replica
    watches the whole cluster), the election of its shards, then kopf."""
    api = api_client(settings.kubeconfig)
    use_as_default(api)
    holder = identity(settings)
    elector: Elector | None = None
    if settings.leader.election:
        elector = Elector(
            api,
            namespace=settings.namespace,
            cluster=settings.leader.lease_name,
            identity=holder,
            timing=Timing(int(settings.leader.lease_duration.total_seconds())),
        )
    shell = build(api, settings, leadership=elector)
    rounds = shell.rounds

    def live() -> str | None:
        return health.leader_check(
            last_round=lambda: rounds.last_round_at,
            last_event=lambda: rounds.last_gpunode_event,
            watched_objects=lambda: len(rounds.store.gpunodes),
            resync_seconds=settings.rounds.resync.total_seconds(),
            watch_stale_seconds=settings.health.watch_stale.total_seconds(),
            clock=utc_now,
        )

    if settings.health.port:
        health.serve(settings.health.port, live=live)
    metrics.LEADER.set(0 if elector else 1)
    if settings.metrics.port:
        metrics.serve(settings.metrics.port, fleet=(elector or Alone()).leads_cluster)
    if elector is not None:
        campaign(elector, shell, namespace=settings.namespace)
    registry = kopf.OperatorRegistry()
    register(registry, shell)
    # kopf names itself user@host unless told, and getpass finds no user for the image's
    # uid 65532 under a kubelet (no /etc/passwd entry, no $USER): the operator exited.
    kopf.run(registry=registry, clusterwide=True, standalone=True, identity=Identity(holder))
    if elector is not None:
        elector.release()  # stopped cleanly (SIGTERM): the others need not wait it out


def campaign(elector: Elector, shell: Shell, *, namespace: str) -> None:
    """Start the election's thread, its shards won and lost said in metrics and Events
    and a pool won decided at once; the process exits if the thread ever ends."""

    def won(lease: str, previous: str) -> None:
        pool = elector.policy_of(lease)
        since = f"taken over from {previous}" if previous else "it was free"
        if lease == elector.cluster or pool is None:
            metrics.LEADER.set(1)
            ref = Ref("Lease", lease, "coordination.k8s.io/v1", namespace=namespace)
            what = "the cluster-wide work (ValidationRuns, the fleet's metrics)"
        else:
            metrics.POOL_LEADER.labels(pool).set(1)
            shell.rounds.taken_over(pool)
            policy = shell.rounds.store.policies.get(pool, {}).get("metadata", {})
            ref = Ref(GPUHealthPolicy.KIND, pool, API_VERSION, policy.get("uid", ""))
            what = f"pool {pool}"
        message = f"{elector.identity} leads {what} (Lease {namespace}/{lease}): {since}"
        shell.events.emit(ref, reason="ShardTakenOver", message=message)

    def lost(lease: str) -> None:
        pool = elector.policy_of(lease)
        if lease == elector.cluster:
            metrics.LEADER.set(0)
        elif pool is not None:
            metrics.POOL_LEADER.labels(pool).set(0)

    elector.won = won
    elector.lost = lost
    threading.Thread(
        target=run_until_it_ends,
        args=(elector.run,),
        kwargs={"stopped": elector.stopped},
        daemon=True,
        name="pitcrew-leases",
    ).start()

"""Simulated node agents for every ``pitcrew.dev/simulated=true`` node, in one process.

This is what the end-to-end tests, the benchmarks and the demo drive. Each
simulated node gets the real :class:`~pitcrew.node.agent.AgentCore` over a
:class:`gpuhealth.backends.sim.SimBackend`, so everything from the checks to
the GPUNode writes is the production code path; only the GPUs are simulated.

- **Faults** come from the Node annotation ``sim.pitcrew.dev/faults`` (the JSON
  fault list of docs/faults.md). A change is swept at once (the analogue of
  the real agent's immediate XID reaction); removing it heals the node.
- **Repairs**: a new ``pitcrew.dev/last-remediation`` annotation (written by
  the operator after each remediation) repairs the node: its faults
  annotation is removed, unless ``sim.pitcrew.dev/repair-fails`` lists that
  remediation action (e.g. ``reset-gpu,reboot``), which models a GPU that
  only a replacement fixes.
- **Probe Jobs** on simulated nodes are answered as the probe pod would: the
  pod runs for ``--probe-seconds`` (or the node's ``sim.pitcrew.dev/probe-for``),
  then the active suite runs on the simulated backend, the report is written to
  ``GPUNode.status.probe`` (field manager ``pitcrew-probe``) and the pod
  succeeds. A probe pod deleted before then (preempted by a workload, its Job
  cancelled) writes nothing, as a killed probe would not.
- **Checks** are those the operator publishes in each GPUNode's
  ``spec.checks`` (interval, heartbeat, thresholds, disabled checks, expected
  GPUs), as for a real agent; ``--interval``/``--heartbeat`` hold until then.
"""

from __future__ import annotations

import copy
import datetime
import json
import logging
import random
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from kubernetes import client
from tenacity import retry, retry_if_exception, stop_after_delay, wait_exponential_jitter

from gpuhealth.active.sim import SimProbes
from gpuhealth.backends.sim import SimBackend
from gpuhealth.checks import Expectations
from gpuhealth.faults import FaultListError, parse_faults
from gpuhealth.runner import Checker
from pitcrew.api.gpunode import ChecksStatus
from pitcrew.api.meta import GROUP, VERSION, Duration
from pitcrew.api.vocabulary import (
    FAULTS_ANNOTATION,
    LAST_REMEDIATION,
    NODE_LABEL,
    PAIR_ANNOTATION,
    PAIR_LABEL,
    PROBE_FOR_ANNOTATION,
    PROBE_LABEL,
    RANK_LABEL,
    REPAIR_FAILS_ANNOTATION,
    SIMULATED_LABEL,
    SUITE_LABEL,
)
from pitcrew.core.convert import gpu_capacity, termination_message
from pitcrew.core.validation import PAIR_NICS
from pitcrew.dev.devcluster.install import bound_token
from pitcrew.kube.client import is_transient, retrying
from pitcrew.kube.events import Recorder, node_ref
from pitcrew.node.agent import AgentCore, simulated_model
from pitcrew.node.probe import pair_report, write_report

logger = logging.getLogger(__name__)
SIMULATED = f"{SIMULATED_LABEL}=true"
PROBE_SUITES = {"quick": "quick", "standard": "full", "burn-in": "full"}
REBOOTING_ACTIONS = frozenset({"reboot", "reimage", "webhook", "cluster-api"})
"""Rungs whose repair reboots (or reprovisions) the machine."""
SIM_BOOT_SECONDS = 2.0
SCHEDULE_S = 0.5
"""How often the loop looks for agents whose interval (their policy's) has passed."""


AGENT_POD_LABEL = "sim.pitcrew.dev/agent"


def _duration(text: str | None, node: str) -> datetime.timedelta | None:
    if not text:
        return None
    try:
        return Duration(text)
    except ValueError as error:
        logger.error("node %s: %s %r is no duration (%s)", node, PROBE_FOR_ANNOTATION, text, error)
        return None


def bound_client(
    admin: client.ApiClient, *, account: str, namespace: str, pod: dict[str, Any]
) -> client.ApiClient:
    """An API client with ``account``'s token bound to ``pod``: what the pod's projected
    token is, so the apiserver knows the pod's node and the admission policy that
    keeps node accounts to their own GPUNode applies."""
    meta = pod["metadata"]
    token = bound_token(
        admin,
        account=account,
        namespace=namespace,
        pod={"metadata": {"name": meta["name"], "uid": meta["uid"]}},
    )
    configuration = copy.copy(admin.configuration)
    configuration.api_key = {"authorization": f"Bearer {token}"}
    configuration.cert_file = configuration.key_file = None
    return client.ApiClient(configuration)


class AgentPods:
    """The agent pods of a simulated DaemonSet (one per node, run by kwok) and, for each,
    an API client with the agent ServiceAccount's token bound to it: what the real
    agent's projected token is. A pod replaced gets a new token."""

    def __init__(self, admin: client.ApiClient, *, namespace: str, account: str) -> None:
        self.admin = admin
        self.namespace = namespace
        self.account = account
        self.pods: dict[str, dict[str, Any]] = {}
        self.clients: dict[str, tuple[str, client.ApiClient]] = {}
        self.lock = threading.Lock()

    def observe(self, pod: dict[str, Any], *, deleted: bool) -> None:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return
        with self.lock:
            if deleted:
                self.pods.pop(node, None)
            else:
                self.pods[node] = pod

    def client_for(self, node: str) -> client.ApiClient | None:
        with self.lock:
            pod = self.pods.get(node)
            cached = self.clients.get(node)
        if pod is None:
            return None
        uid = pod["metadata"]["uid"]
        if cached is not None and cached[0] == uid:
            return cached[1]
        api = bound_client(self.admin, account=self.account, namespace=self.namespace, pod=pod)
        with self.lock:
            self.clients[node] = (uid, api)
        return api


until_it_lands = retry(
    retry=retry_if_exception(is_transient),
    wait=wait_exponential_jitter(multiplier=0.2, max=5.0),
    stop=stop_after_delay(120),
    reraise=True,
)
"""For the simulated machine's own state, which must not be lost to a restart of the
apiserver (the operator's writes need no such patience: its next round retries)."""


class SimNode:
    def __init__(
        self,
        api: client.ApiClient,
        node: dict[str, Any],
        *,
        heartbeat: datetime.timedelta,
        interval: datetime.timedelta,
        noise: float = 1.0,
    ) -> None:
        meta = node["metadata"]
        self.name = meta["name"]
        gpus = gpu_capacity(node)
        self.backend = SimBackend(
            node=self.name, model=simulated_model(node), gpus=gpus, noise=noise
        )
        self.checker = Checker(
            backend=self.backend,
            node=self.name,
            expect=Expectations(gpus=gpus, model=self.backend.model, ib_ports=8),
        )
        self.core = AgentCore(
            api=api,
            node=self.name,
            node_uid=meta.get("uid", ""),
            checker=self.checker,
            heartbeat=heartbeat,
            interval=interval,
        )
        self.swept = 0.0
        """``time.monotonic()`` of the last periodic sweep."""
        self.faults_text: str | None = None
        self.probed: set[str] = set()
        self.probe_for: datetime.timedelta | None = None
        """How long its probe pods run (``sim.pitcrew.dev/probe-for``), if it says."""


class SimAgents:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        interval: datetime.timedelta,
        heartbeat: datetime.timedelta,
        probe_account: str | None = None,
        agent_pods: AgentPods | None = None,
        workers: int = 16,
        noise: float = 1.0,
        probe_seconds: float = 1.0,
    ) -> None:
        self.api = api
        self.probe_seconds = probe_seconds
        """How long a probe pod runs before it reports, unless its node says."""
        self.probe_account = probe_account
        """When set, each probe report is written with this account's token bound to
        the probe pod, as the pod's projected token is: a permission the chart does not
        grant fails here too, and the admission policy that keeps a probe to its own
        node's GPUNode applies to the simulated fleet."""
        self.agent_pods = agent_pods
        """When set, each node's agent writes with the agent ServiceAccount's token bound
        to that node's agent pod, as the DaemonSet's agent does: the admission policy
        that binds an agent to its own node applies to the simulated fleet too."""
        self.core = client.CoreV1Api(api)
        self.events = Recorder(api, component="pitcrew-sim-agents")
        self.interval = interval
        self.heartbeat = heartbeat
        self.noise = noise
        self.nodes: dict[str, SimNode] = {}
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sim-agent")
        # Faults and repairs are swept on their own threads, never queued behind the
        # periodic sweep of the whole fleet (a real agent has no such queue).
        self.urgent = ThreadPoolExecutor(max_workers=8, thread_name_prefix="sim-urgent")
        self.stop = threading.Event()
        self.published: dict[str, dict[str, Any]] = {}
        """The latest GPUNode of nodes whose simulated agent does not exist yet."""
        self.pairs_answered: set[str] = set()
        self.rebooted: set[tuple[str, int]] = set()
        """``RemediationStarted`` Events (uid, count) the simulated machines acted on."""
        self.lock = threading.Lock()

    # -- reacting to Nodes ----------------------------------------------------------------

    def on_node(self, node: dict[str, Any], *, deleted: bool = False) -> None:
        name = node["metadata"]["name"]
        if deleted:
            with self.lock:
                self.nodes.pop(name, None)
            return
        with self.lock:
            sim = self.nodes.get(name)
            if sim is None:
                sim = self.nodes[name] = SimNode(
                    self.api,
                    node,
                    heartbeat=self.heartbeat,
                    interval=self.interval,
                    noise=self.noise,
                )
                published = self.published.pop(name, None)
                if published is not None:
                    sim.core.follow(published)
        if not ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID"):
            self.urgent.submit(self._boot, name)  # the kubelet reports its boot ID
        annotations = node["metadata"].get("annotations") or {}
        sim.probe_for = _duration(annotations.get(PROBE_FOR_ANNOTATION), name)
        urgent = False
        if sim.core.note_remediation(annotations):
            if not self._repair(sim, annotations):
                sim.backend.replay_xids()
            urgent = True
        text = annotations.get(FAULTS_ANNOTATION, "")
        if text != sim.faults_text:
            sim.faults_text = text
            try:
                sim.backend.set_faults(parse_faults(text))
            except FaultListError as error:
                # Once per value (the text is remembered): the node stays as it was.
                logger.error("node %s: %s", name, error)
                self.events.emit(
                    node_ref(name, node["metadata"].get("uid", "")),
                    reason="MalformedFaults",
                    message=f"{FAULTS_ANNOTATION} ignored: {error}"[:1024],
                    warning=True,
                )
                return
            if not text:
                sim.checker.memory.clear_latched()
            urgent = True
        if urgent:
            self.urgent.submit(self._tick, sim)

    def on_gpunode(self, gpunode: dict[str, Any], *, deleted: bool = False) -> None:
        """A GPUNode changed: its agent follows the checks it publishes and the reset
        rung recorded on it (closing the simulated NVML for it, sweeping once it is over)."""
        if deleted:
            return
        name = gpunode["metadata"]["name"]
        with self.lock:
            sim = self.nodes.get(name)
            if sim is None:
                self.published[name] = gpunode
                return
        released = sim.core.released
        sim.core.follow(gpunode)
        if released and not sim.core.released:
            # The reset is over: sweep now, as the real agent's loop does when woken.
            self.urgent.submit(self._tick, sim)

    def _boot(self, node: str) -> None:
        """The machine (re)booted: its kubelet reports a new boot ID."""
        try:
            retrying(self.core.patch_node_status)(
                node, {"status": {"nodeInfo": {"bootID": str(uuid.uuid4())}}}
            )
        except Exception:
            logger.exception("simulated boot of %s failed", node)

    def on_event(self, event: dict[str, Any], *, deleted: bool = False) -> None:
        """A rung that reboots or reprovisions the machine was started (the operator's
        ``RemediationStarted`` Event: the BMC, provisioner or Cluster API accepted it):
        the simulated machine reboots, after a short boot. A rung whose start failed
        (an unreachable webhook) posts no such Event, and nothing happens."""
        involved = event.get("involvedObject") or {}
        name = involved.get("name", "")
        seen = (event["metadata"].get("uid", ""), event.get("count") or 1)
        if deleted or name not in self.nodes or seen in self.rebooted:
            return
        self.rebooted.add(seen)
        self.urgent.submit(self._reboot_if_asked, name)

    def _reboot_if_asked(self, name: str) -> None:
        try:
            gpunode = cast(
                dict[str, Any],
                client.CustomObjectsApi(self.api).get_cluster_custom_object(
                    GROUP, VERSION, "gpunodes", name
                ),
            )
        except Exception:
            logger.exception("simulated machine %s: reading its GPUNode failed", name)
            return
        remediation = (gpunode.get("status") or {}).get("remediation") or {}
        if remediation.get("action") in REBOOTING_ACTIONS:
            timer = threading.Timer(SIM_BOOT_SECONDS, self._boot, args=(name,))
            timer.daemon = True
            timer.start()

    def _repair(self, sim: SimNode, annotations: dict[str, str]) -> bool:
        action = json.loads(annotations[LAST_REMEDIATION]).get("action", "")
        fails = {a.strip() for a in annotations.get(REPAIR_FAILS_ANNOTATION, "").split(",")}
        if action in fails:
            logger.info("node %s: simulated %s does not fix it", sim.name, action)
            return False
        if annotations.get(FAULTS_ANNOTATION):
            # The machine is repaired now; the annotation that says what is wrong
            # with it must go too, or it would read as a fault still on the machine.
            # An apiserver restarting takes longer than one call's retries.
            until_it_lands(self.core.patch_node)(
                sim.name,
                {"metadata": {"annotations": {FAULTS_ANNOTATION: None}}},
                _content_type="application/merge-patch+json",
            )
        return True

    def _tick(self, sim: SimNode, *, force: bool = False) -> None:
        try:
            if self.agent_pods is not None:
                api = self.agent_pods.client_for(sim.name)
                if api is None:
                    return  # no agent pod on the node yet: no agent either
                sim.core.api = api
            sim.core.tick(force=force)
        except Exception:
            logger.exception("sim agent for %s failed a sweep", sim.name)

    # -- probe pods -----------------------------------------------------------------------

    def on_probe_pod(self, pod: dict[str, Any]) -> None:
        labels = pod["metadata"].get("labels") or {}
        if RANK_LABEL in labels:
            self._on_pair_pod(pod, labels)
            return
        node, suite = labels.get(NODE_LABEL), labels.get(SUITE_LABEL)
        sim = self.nodes.get(node or "")
        job = labels.get("job-name") or pod["metadata"]["name"]
        running = (pod.get("status") or {}).get("phase") == "Running"
        if sim is None or suite is None or not running or job in sim.probed:
            return
        sim.probed.add(job)
        seconds = sim.probe_for.total_seconds() if sim.probe_for else self.probe_seconds
        where = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        # A thread of its own, as each probe pod is a process of its own: a report
        # write waiting out a throttled apiserver holds up no other node.
        timer = threading.Timer(seconds, self._probe, args=(sim, suite, job, where))
        timer.daemon = True
        timer.start()

    def _on_pair_pod(self, pod: dict[str, Any], labels: dict[str, str]) -> None:
        """Finish a pair test as the kubelet would for its rank-0 pod: once the pod has
        terminated, its termination message carries the report the real probe leaves
        (from both nodes' simulated NICs). Nothing else is written: the operator reads
        the message and judges it, exactly as on a real cluster."""
        pair = (pod["metadata"].get("annotations") or {}).get(PAIR_ANNOTATION, "")
        key = f"{labels.get(PAIR_LABEL)}"
        terminated = (pod.get("status") or {}).get("phase") == "Succeeded"
        if labels.get(RANK_LABEL) != "0" or not terminated or key in self.pairs_answered:
            return
        if termination_message(pod):
            return
        members = [self.nodes.get(n) for n in pair.split("--")]
        if len(members) != 2 or None in members:
            return
        self.pairs_answered.add(key)
        sims = [m for m in members if m is not None]
        busbw = min(SimProbes(s.backend).internode_busbw_gbps(PAIR_NICS) for s in sims)
        self.urgent.submit(self._leave_message, pod, pair_report(busbw_gbps=busbw))

    def _leave_message(self, pod: dict[str, Any], message: str) -> None:
        meta = pod["metadata"]
        statuses = []
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            state = dict(container.get("state") or {})
            state["terminated"] = {**(state.get("terminated") or {}), "message": message}
            statuses.append({**container, "state": state})
        try:
            retrying(client.CoreV1Api(self.api).patch_namespaced_pod_status)(
                meta["name"], meta["namespace"], {"status": {"containerStatuses": statuses}}
            )
        except Exception:
            logger.exception("simulated pair pod %s: leaving its report failed", meta["name"])

    def _probe(self, sim: SimNode, suite: str, job: str, where: tuple[str, str]) -> None:
        """The probe pod's run ends: report and succeed, unless the pod is gone."""
        namespace, name = where
        try:
            raw: Any = self.core.read_namespaced_pod(name, namespace, _preload_content=False)
            pod = json.loads(raw.data)
        except client.ApiException as error:
            if error.status != 404:
                logger.exception("simulated probe on %s: reading pod %s failed", sim.name, name)
            return
        stopped = pod["metadata"].get("deletionTimestamp") is not None
        if stopped or (pod.get("status") or {}).get("phase") != "Running":
            logger.info("probe pod %s on %s was stopped before it reported", name, sim.name)
            return
        try:
            report = sim.checker.run(
                suite=PROBE_SUITES.get(suite, "full"), probes=SimProbes(sim.backend)
            )
            probe = ChecksStatus(
                report_time=report.time,
                backend=report.backend,
                suite=suite,
                results=report.checks,
                job=job,
            )
            api = (
                bound_client(self.api, account=self.probe_account, namespace=namespace, pod=pod)
                if self.probe_account
                else self.api
            )
            write_report(api, node=sim.name, probe=probe)
        except Exception:
            # The real probe's process dies on the error and its pod fails.
            logger.exception("simulated probe on %s failed", sim.name)
            self._exit(pod, exit_code=1)
            return
        self._exit(pod, exit_code=0)

    def _exit(self, pod: dict[str, Any], *, exit_code: int) -> None:
        """End a probe pod's container as its kubelet would report it."""
        now = datetime.datetime.now(datetime.UTC).isoformat()
        statuses = [
            {
                "name": c["name"],
                "image": c["image"],
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": "Completed" if exit_code == 0 else "Error",
                        "startedAt": now,
                        "finishedAt": now,
                    }
                },
            }
            for c in pod["spec"]["containers"]
        ]
        body = {
            "status": {
                "phase": "Succeeded" if exit_code == 0 else "Failed",
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "PodCompleted"},
                    {"type": "ContainersReady", "status": "False", "reason": "PodCompleted"},
                ],
                "containerStatuses": statuses,
            }
        }
        meta = pod["metadata"]
        retrying(self.core.patch_namespaced_pod_status)(meta["name"], meta["namespace"], body)

    # -- loops ----------------------------------------------------------------------------

    def _watch(self, list_fn: Any, handler: Any, **kwargs: Any) -> None:
        """List then watch, on raw JSON: building client models for thousands of
        Node events a minute would cost more CPU than the simulated agents."""
        while not self.stop.is_set():
            try:
                listing = json.loads(list_fn(_preload_content=False, **kwargs).data)
                for item in listing["items"]:
                    handler(item, deleted=False)
                stream = list_fn(
                    watch=True,
                    timeout_seconds=300,
                    _preload_content=False,
                    resource_version=listing["metadata"]["resourceVersion"],
                    **kwargs,
                )
                for line in stream:
                    if self.stop.is_set():
                        return
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        break
                    handler(event["object"], deleted=event["type"] == "DELETED")
            except Exception as error:
                logger.warning("watch %s interrupted (%s); restarting", list_fn.__name__, error)
                self.stop.wait(1.0)

    def _list_gpunodes(self, **kwargs: Any) -> Any:
        return client.CustomObjectsApi(self.api).list_cluster_custom_object(
            GROUP, VERSION, "gpunodes", **kwargs
        )

    def _on_pod(self, pod: dict[str, Any], *, deleted: bool) -> None:
        if not deleted:
            self.on_probe_pod(pod)

    def _on_agent_pod(self, pod: dict[str, Any], *, deleted: bool) -> None:
        if self.agent_pods is not None:
            self.agent_pods.observe(pod, deleted=deleted)

    def run(self) -> None:
        threads = [
            threading.Thread(
                target=self._watch,
                args=(self.core.list_node, self.on_node),
                kwargs={"label_selector": SIMULATED},
                daemon=True,
            ),
            threading.Thread(
                target=self._watch,
                args=(self.core.list_pod_for_all_namespaces, self._on_pod),
                kwargs={"label_selector": f"{PROBE_LABEL}=true"},
                daemon=True,
            ),
            threading.Thread(
                target=self._watch,
                args=(self._list_gpunodes, self.on_gpunode),
                daemon=True,
            ),
            threading.Thread(
                target=self._watch,
                args=(self.core.list_namespaced_event, self.on_event),
                kwargs={
                    "namespace": "default",
                    "field_selector": "reason=RemediationStarted,involvedObject.kind=Node",
                },
                daemon=True,
            ),
        ]
        if self.agent_pods is not None:
            threads.append(
                threading.Thread(
                    target=self._watch,
                    args=(self.core.list_namespaced_pod, self._on_agent_pod),
                    kwargs={
                        "namespace": self.agent_pods.namespace,
                        "label_selector": f"{AGENT_POD_LABEL}=true",
                    },
                    daemon=True,
                )
            )
        for thread in threads:
            thread.start()
        while not self.stop.is_set():
            now = time.monotonic()
            with self.lock:
                due = [
                    s
                    for s in self.nodes.values()
                    if now - s.swept >= s.core.interval.total_seconds()
                ]
            random.shuffle(due)
            for sim in due:
                sim.swept = now
                self.pool.submit(self._tick, sim)
            self.stop.wait(SCHEDULE_S)

"""The chaos suite's harness: real faults against real components, and the invariants
every scenario must hold (docs/reliability.md).

A run builds a fleet of ``NODES`` simulated GPU nodes under a policy whose breaker
lets ``MAX_UNHEALTHY`` out at once, with a training Deployment on half of them under
a PodDisruptionBudget (one pod out at a time), so that faults land on busy nodes and
drains are under way when the disruption strikes. Faults land on healthy nodes every
``FAULT_EVERY`` seconds, with a burst past the breaker halfway. The scenario's
disruption (kill the leader, restart the apiserver or etcd, partition an operator)
repeats on its timer, against the replica that leads the fleet's pool; an operator
process that exits is started again as a kubelet restarts a pod.

The invariants, checked after every scenario:

- no remediation started twice: each fault gets exactly one reset Job;
- the breaker's bound never exceeded (one-list snapshots every second);
- no PodDisruptionBudget violated: the Deployment's running pods never fewer than
  the budget allows (sampled every half second);
- no lost decision: every fault ends repaired and its node Healthy, with no Pitcrew
  cordon or taint left.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import urllib3
from kubernetes import client

from pitcrew.core.lease import pool_lease
from pitcrew.dev.stack import SimStack
from support.fleet import GROUP_LABEL, NAMESPACE, Fleet, eventually

FATAL_XID = [{"type": "xid", "gpu": 0, "code": 79}]
NODES = int(os.environ.get("PITCREW_CHAOS_NODES") or 12)
"""The fleet's size: 12 in CI, 50 for the documented long run."""
MAX_UNHEALTHY = 4
FAULT_EVERY = 5.0
FAULTS_EACH = 2
BURST = 7
"""Faults at once, halfway through: more than the breaker lets out."""
REPLICAS = NODES // 2
"""Training pods, one node each: half the fleet busy, so drains meet the budget."""
UNHEALTHY = {"Suspect", "Quarantined", "Draining", "Remediating", "Retired"}
OPERATORS = ("operator-a", "operator-b")
FAULTS = "sim.pitcrew.dev/faults"
"""The simulated machine's fault list; the simulated agent clears it when a repair
takes."""
APP = "chaos-train"


def chaos_seconds() -> float | None:
    """How long each scenario's disruption lasts: ``PITCREW_CHAOS_SECONDS``, or None
    (the scenarios are skipped)."""
    value = os.environ.get("PITCREW_CHAOS_SECONDS")
    return float(value) if value else None


def holder(api: client.ApiClient, fleet: Fleet) -> str:
    """The replica that leads ``fleet``'s pool: the one whose death or partition
    matters to it ("" while no one does)."""
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(
            pool_lease("pitcrew-operator", fleet.group), NAMESPACE
        )
    except client.ApiException as error:
        if error.status == 404:
            return ""
        raise
    return str(lease.spec.holder_identity or "")


@dataclass(eq=False)  # a thread is hashed by identity
class Sampler(threading.Thread):
    """Samples the fleet and the training pods twice a second."""

    fleet: Fleet
    namespace: str
    most_out: int = 0
    fewest_running: int = REPLICAS
    samples: int = 0
    worst: list[str] = field(default_factory=list)
    """The nodes out in the sample with the most out."""
    pods_seen: set[str] = field(default_factory=set)
    """Every training pod UID seen: more than ``REPLICAS`` means pods were drained."""
    done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        super().__init__(daemon=True)

    def run(self) -> None:
        names = set(self.fleet.nodes)
        while not self.done.wait(0.5):
            try:
                # One list is one snapshot (one resourceVersion): reading node by node
                # could count a node that just left beside one that just took its place.
                listed = self.fleet.custom.list_cluster_custom_object(
                    "pitcrew.dev", "v1alpha1", "gpunodes"
                )
                pods = self.fleet.core.list_namespaced_pod(
                    self.namespace, label_selector=f"app={APP}"
                ).items
            except (client.ApiException, OSError, urllib3.exceptions.HTTPError):
                continue  # the apiserver is down or busy: the next sample counts
            running = sum(
                1
                for p in pods
                if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
            )
            out = sorted(
                f"{item['metadata']['name']} {phase} since {status.get('phaseSince')}"
                for item in listed["items"]
                if item["metadata"]["name"] in names
                and (phase := (status := item.get("status") or {}).get("phase")) in UNHEALTHY
            )
            if len(out) > self.most_out:
                self.most_out, self.worst = len(out), out
            self.fewest_running = min(self.fewest_running, running)
            self.pods_seen |= {p.metadata.uid for p in pods}
            self.samples += 1


@dataclass
class Outcome:
    disruptions: int
    faults: int
    most_out: int
    fewest_running: int
    replaced: int
    """Training pods drained and replaced during the run."""
    worst: list[str]

    def line(self) -> str:
        return (
            f"{self.disruptions} disruptions, {self.faults} faults, at most {self.most_out} "
            f"nodes out, {self.replaced} training pods drained, at least "
            f"{self.fewest_running} of {REPLICAS} running"
        )


class Chaos:
    """One scenario: ``run`` disrupts on a timer while faults land, ``check`` asserts
    the invariants."""

    def __init__(
        self, fleet: Fleet, pitcrew: SimStack, api: client.ApiClient, namespace: str
    ) -> None:
        self.fleet, self.pitcrew, self.api, self.namespace = fleet, pitcrew, api, namespace
        self.injected = dict.fromkeys(fleet.nodes, 0)
        self.kubeconfigs: dict[str, Path] = {}
        """Operators started with their own kubeconfig (through a proxy)."""

    # -- set-up ---------------------------------------------------------------------------

    def operators(self, kubeconfigs: dict[str, Path] | None = None) -> None:
        """Both operators running, each on its kubeconfig (``kubeconfigs`` by name: an
        operator behind a proxy), the session's default otherwise."""
        self.kubeconfigs = kubeconfigs or {}
        for name in OPERATORS:
            if name in self.kubeconfigs and name in self.pitcrew.running:
                self.pitcrew.kill(name)  # started on the plain kubeconfig
        self._supervise()

    def _start(self, name: str) -> None:
        self.pitcrew.running.pop(name, None)
        self.pitcrew.start_operator(name, kubeconfig=self.kubeconfigs.get(name))

    def prepare(self) -> None:
        self.fleet.policy(
            safety={
                "maxUnhealthy": MAX_UNHEALTHY,
                "maxConcurrentDrains": 4,
                "maxConcurrentRemediations": 4,
                # Faults the breaker refused are taken out once it closes; a short
                # cooldown lets them be within the test's time.
                "stormCooldown": "10s",
            },
            # Faults land on the same nodes again within minutes here: no node is a
            # lemon, so every fault must end in exactly one repair.
            remediation={"lemon": {"maxRemediations": 100}},
        )
        for node in self.fleet.nodes:
            self.fleet.wait_phase(node, "Healthy", timeout=120)
        selector = {"app": APP}
        client.AppsV1Api(self.api).create_namespaced_deployment(
            self.namespace,
            {
                "metadata": {"name": APP},
                "spec": {
                    "replicas": REPLICAS,
                    "selector": {"matchLabels": selector},
                    "template": {
                        "metadata": {"labels": selector},
                        "spec": {
                            "nodeSelector": {GROUP_LABEL: self.fleet.group},
                            "containers": [
                                {
                                    "name": "train",
                                    "image": "trainer:1",
                                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                                }
                            ],
                            "terminationGracePeriodSeconds": 1,
                        },
                    },
                },
            },
        )
        client.PolicyV1Api(self.api).create_namespaced_pod_disruption_budget(
            self.namespace,
            {
                "metadata": {"name": APP},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector}},
            },
        )
        eventually(
            lambda: len(self._running_pods()) == REPLICAS, timeout=60, what="training running"
        )

    def _running_pods(self) -> list[client.V1Pod]:
        return [
            p
            for p in self.fleet.core.list_namespaced_pod(
                self.namespace, label_selector=f"app={APP}"
            ).items
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
        ]

    # -- the run --------------------------------------------------------------------------

    def run(self, *, seconds: float, every: float, disrupt: Callable[[], object]) -> Outcome:
        sampler = Sampler(self.fleet, self.namespace)
        sampler.start()
        disruptions, turn = 0, 0
        started = time.monotonic()
        next_disruption, next_fault = started + every, started
        while time.monotonic() - started < seconds:
            now = time.monotonic()
            self._supervise()
            if now >= next_fault:
                next_fault += FAULT_EVERY
                halfway = turn == int(seconds / FAULT_EVERY / 2)
                self.faults(BURST if halfway else FAULTS_EACH, offset=turn % 3)
                turn += 1
            if now >= next_disruption:
                next_disruption += every
                disrupt()
                disruptions += 1
            time.sleep(0.5)
        # No lost decision: every fault, the ones the breaker held back included, ends
        # repaired (the simulated machine clears its fault list when a repair takes).
        for node in self.fleet.nodes:
            try:
                eventually(
                    lambda node=node: self._repaired(node),
                    timeout=300,
                    what=f"{node} repaired and Healthy",
                )
            except AssertionError as error:
                raise AssertionError(f"{error}\n{self.describe(node)}") from None
        sampler.done.set()
        sampler.join()
        return Outcome(
            disruptions=disruptions,
            faults=sum(self.injected.values()),
            most_out=sampler.most_out,
            fewest_running=sampler.fewest_running,
            replaced=len(sampler.pods_seen) - REPLICAS,
            worst=sampler.worst,
        )

    def describe(self, node: str) -> str:
        """What a node stuck out of service shows: for the failure message."""
        status = self.fleet.gpunode(node).get("status") or {}
        jobs = (
            client.BatchV1Api(self.api)
            .list_namespaced_job(NAMESPACE, label_selector=f"pitcrew.dev/node={node}")
            .items
        )
        conditions = [
            f"{c.get('type')}={c.get('status')} {c.get('reason')}: {c.get('message', '')[:160]}"
            for c in status.get("conditions") or []
        ]
        return "\n".join(
            [
                f"phase {status.get('phase')} since {status.get('phaseSince')}",
                f"remediation {status.get('remediation')}",
                f"drain {status.get('drain')}",
                f"history {(status.get('history') or [])[-4:]}",
                *conditions,
                f"annotations {self.fleet.node(node).metadata.annotations}",
                "jobs " + ", ".join(f"{j.metadata.name} {j.status.succeeded}" for j in jobs),
                f"probe report of {(status.get('probe') or {}).get('job')}",
                *(self._pod_line(job.metadata.name) for job in jobs),
                self._holders(node),
            ]
        )

    def _pod_line(self, job: str) -> str:
        """Where a Job's pods stalled: never created, unscheduled, running, ended."""
        pods = (
            client.CoreV1Api(self.api)
            .list_namespaced_pod(NAMESPACE, label_selector=f"job-name={job}")
            .items
        )
        if not pods:
            return f"{job}: no pod"
        return "; ".join(
            f"{job}: pod {p.metadata.name} on {p.spec.node_name} {p.status.phase} "
            + ",".join(
                f"{c.type}={c.status}"
                + (f" ({c.reason}: {(c.message or '')[:300]})" if c.status != "True" else "")
                for c in p.status.conditions or []
            )
            for p in pods
        )

    def _holders(self, node: str) -> str:
        """The pods the scheduler counts on ``node`` (not Succeeded or Failed)."""
        pods = (
            client.CoreV1Api(self.api)
            .list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
            .items
        )
        held = [
            f"{p.metadata.namespace}/{p.metadata.name} {p.status.phase}"
            + (" terminating" if p.metadata.deletion_timestamp else "")
            for p in pods
            if p.status.phase not in ("Succeeded", "Failed")
        ]
        found = self.fleet.node(node)
        allocatable = (found.status.allocatable or {}).get("nvidia.com/gpu")
        taints = ", ".join(f"{t.key}:{t.effect}" for t in found.spec.taints or [])
        ready = next((c for c in found.status.conditions or [] if c.type == "Ready"), None)
        readiness = f"Ready={ready.status} ({ready.reason})" if ready else "no Ready condition"
        return (
            f"{readiness}; taints {taints or 'none'}; gpus allocatable {allocatable}; "
            f"pods on it: {', '.join(held) or 'none'}"
        )

    def _repaired(self, node: str) -> bool:
        self._supervise()
        return self.fleet.phase(node) == "Healthy" and FAULTS not in (
            self.fleet.node(node).metadata.annotations or {}
        )

    def _supervise(self) -> None:
        """Start again an operator that exited (a leader that lost its Lease exits)."""
        for name in OPERATORS:
            process = self.pitcrew.running.get(name)
            if process is None or process.poll() is not None:
                self._start(name)

    def faults(self, count: int, *, offset: int = 0) -> None:
        """A fatal XID on ``count`` healthy nodes (a burst takes the first ones)."""
        try:
            # A node whose fault is still on it (not yet repaired, or held by the
            # breaker) would take a second injection as the same annotation: no new one.
            healthy = [
                n
                for n in self.fleet.nodes
                if self.fleet.phase(n) == "Healthy"
                and FAULTS not in (self.fleet.node(n).metadata.annotations or {})
            ]
        except (client.ApiException, OSError):
            return  # the apiserver is restarting: the next turn injects
        chosen = healthy[:count] if count > FAULTS_EACH else healthy[offset : offset + count]
        for node in chosen:
            self.fleet.inject(node, FATAL_XID)
            self.injected[node] += 1

    # -- the invariants -------------------------------------------------------------------

    def check(self, outcome: Outcome, *, seconds: float, every: float) -> None:
        print(f"chaos: {outcome.line()}")
        assert outcome.disruptions >= seconds // every - 1
        assert outcome.faults >= seconds // FAULT_EVERY
        assert outcome.most_out <= MAX_UNHEALTHY, f"{outcome.most_out} out: {outcome.worst}"
        assert outcome.most_out >= 2  # the faults did take nodes out during the chaos
        assert outcome.fewest_running >= REPLICAS - 1, "a PodDisruptionBudget was exceeded"
        assert outcome.replaced >= 1  # faults did land on busy nodes: drains met the budget
        jobs = client.BatchV1Api(self.api)
        for node in self.fleet.nodes:
            resets = jobs.list_namespaced_job(
                NAMESPACE,
                label_selector=f"pitcrew.dev/node={node},pitcrew.dev/remediation=reset-gpu",
            ).items
            assert len(resets) == self.injected[node], (node, [j.metadata.name for j in resets])
            spec = self.fleet.node(node).spec
            assert not spec.unschedulable, node
            assert not [t.key for t in spec.taints or [] if t.key.startswith("pitcrew.dev/")], node

    def finish(self) -> None:
        """Back to the session's one operator, as it began, on the plain kubeconfig."""
        self.kubeconfigs = {}
        for name in OPERATORS:
            if name in self.pitcrew.running:
                self.pitcrew.kill(name)
        self._start(OPERATORS[0])

"""Chaos: the leader is killed with SIGKILL every 20 s while nodes fail and recover.

Two operators run against the real apiserver; every 20 s the one holding the Lease
dies mid-work (no goodbye, no lease release) and comes back as the standby. All
the while, faults land on healthy nodes. The invariants (docs/reliability.md):

- no remediation is started twice: each fault gets exactly one reset Job;
- the circuit breaker's bound is never exceeded (sampled every second), also when a
  burst of faults halfway through asks for more;
- no decision is lost: every failed node ends Healthy, and no node is left
  cordoned or tainted by Pitcrew once Healthy.

It runs when ``PITCREW_CHAOS_SECONDS`` says how long the chaos lasts (the documented
run: 300): it leaves the machine loaded for minutes, which made the timing-sensitive
job-accounting and demo tests after it flaky on a 2-core CI machine, so CI skips it.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
from fleet import NAMESPACE, Fleet, eventually
from kubernetes import client

from pitcrew.sim.stack import SimStack

FATAL_XID = [{"type": "xid", "gpu": 0, "code": 79}]
NODES = 12
MAX_UNHEALTHY = 4
KILL_EVERY = 20.0
FAULT_EVERY = 5.0
FAULTS_EACH = 2
BURST = 7
"""Faults at once, halfway through: more than the breaker lets out."""
UNHEALTHY = {"Suspect", "Quarantined", "Draining", "Remediating", "Retired"}
OPERATORS = ("operator-a", "operator-b")
FAULTS = "sim.pitcrew.dev/faults"
"""The simulated machine's fault list; the simulated agent clears it when a repair
takes."""


def holder(api: client.ApiClient) -> str:
    lease = client.CoordinationV1Api(api).read_namespaced_lease("pitcrew-operator", NAMESPACE)
    return str(lease.spec.holder_identity)


class Watcher(threading.Thread):
    """Samples the fleet's phases every second: the most nodes ever out for a fault."""

    def __init__(self, fleet: Fleet) -> None:
        super().__init__(daemon=True)
        self.fleet = fleet
        self.most = 0
        self.done = threading.Event()

    def run(self) -> None:
        names = set(self.fleet.nodes)
        while not self.done.wait(1.0):
            try:
                # One list is one snapshot (one resourceVersion): reading node by node
                # could count a node that just left beside one that just took its place.
                listed = self.fleet.custom.list_cluster_custom_object(
                    "pitcrew.dev", "v1alpha1", "gpunodes"
                )
            except client.ApiException:
                continue  # the apiserver is busy: the next sample counts
            phases = [
                (item.get("status") or {}).get("phase")
                for item in listed["items"]
                if item["metadata"]["name"] in names
            ]
            self.most = max(self.most, sum(p in UNHEALTHY for p in phases))


def test_the_leader_killed_every_20_s_while_nodes_fail_loses_and_repeats_nothing(
    fleet_factory: type[Fleet], pitcrew: SimStack, api_client: client.ApiClient
) -> None:
    if not os.environ.get("PITCREW_CHAOS_SECONDS"):
        pytest.skip("chaos runs with PITCREW_CHAOS_SECONDS set (docs/reliability.md)")
    seconds = float(os.environ["PITCREW_CHAOS_SECONDS"])
    for name in OPERATORS:
        if name not in pitcrew.running or pitcrew.running[name].poll() is not None:
            pitcrew.running.pop(name, None)
            pitcrew.start_operator(name)
    fleet = fleet_factory(size=NODES)
    fleet.policy(
        safety={
            "maxUnhealthy": MAX_UNHEALTHY,
            "maxConcurrentDrains": 4,
            "maxConcurrentRemediations": 4,
            # Faults the breaker refused are taken out once it closes; a short cooldown
            # lets them be within the test's time.
            "stormCooldown": "10s",
        },
        # Faults land on the same nodes again within minutes here: no node is a lemon,
        # so every fault must end in exactly one repair.
        remediation={"lemon": {"maxRemediations": 100}},
    )
    for node in fleet.nodes:
        fleet.wait_phase(node, "Healthy", timeout=120)
    watcher = Watcher(fleet)
    watcher.start()
    injected = dict.fromkeys(fleet.nodes, 0)
    kills = 0
    started = time.monotonic()
    next_kill, next_fault = started + KILL_EVERY, started
    turn = 0
    while time.monotonic() - started < seconds:
        now = time.monotonic()
        if now >= next_fault:
            next_fault += FAULT_EVERY
            # A node whose fault is still on it (not yet repaired, or held by the
            # breaker) would take a second injection as the same annotation: no new fault.
            healthy = [
                n
                for n in fleet.nodes
                if fleet.phase(n) == "Healthy"
                and FAULTS not in (fleet.node(n).metadata.annotations or {})
            ]
            halfway = turn == int(seconds / FAULT_EVERY / 2)
            chosen = healthy[:BURST] if halfway else healthy[turn % 3 : turn % 3 + FAULTS_EACH]
            for node in chosen:
                fleet.inject(node, FATAL_XID)
                injected[node] += 1
            turn += 1
        if now >= next_kill:
            next_kill += KILL_EVERY
            leader = holder(api_client)
            if leader in pitcrew.running:
                pitcrew.kill(leader)  # SIGKILL mid-work
                pitcrew.start_operator(leader)  # back as the standby
                kills += 1
        time.sleep(0.5)
    # No lost decision: every fault, the ones the breaker held back included, ends
    # repaired (the simulated machine clears its fault list when a repair takes).
    for node in fleet.nodes:
        eventually(
            lambda node=node: (
                fleet.phase(node) == "Healthy"
                and FAULTS not in (fleet.node(node).metadata.annotations or {})
            ),
            timeout=300,
            what=f"{node} repaired and Healthy",
        )
    watcher.done.set()
    watcher.join()

    faults = sum(injected.values())
    print(f"chaos: {kills} leader kills, {faults} faults, at most {watcher.most} nodes out")
    assert kills >= seconds // KILL_EVERY - 1
    assert faults >= seconds // FAULT_EVERY
    assert watcher.most <= MAX_UNHEALTHY, f"{watcher.most} nodes out at once"
    assert watcher.most >= 2  # the faults did take nodes out while the leaders died
    jobs = client.BatchV1Api(api_client)
    pitcrew.kill("operator-b")  # the session runs one operator, as it began
    if "operator-a" not in pitcrew.running:
        pitcrew.start_operator("operator-a")
    for node in fleet.nodes:
        resets = jobs.list_namespaced_job(
            NAMESPACE, label_selector=f"pitcrew.dev/node={node},pitcrew.dev/remediation=reset-gpu"
        ).items
        assert len(resets) == injected[node], (node, [j.metadata.name for j in resets])
        spec = fleet.node(node).spec
        assert not spec.unschedulable, node
        assert not [t.key for t in spec.taints or [] if t.key.startswith("pitcrew.dev/")], node

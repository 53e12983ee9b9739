"""Past one leader: two replicas lead one pool each (a Lease per pool), and when one
dies the other takes its pool over within the Lease duration plus the renew deadline,
while its own pool never stops."""

from __future__ import annotations

import time

from kubernetes import client

from pitcrew.core.lease import Timing, pool_lease
from pitcrew.dev.stack import SimStack
from support.fixtures import HealthyFleet
from support.fleet import NAMESPACE, eventually

FATAL_XID = [{"type": "xid", "gpu": 0, "code": 79}]
CLUSTER = "pitcrew-operator"
OPERATORS = ("operator-a", "operator-b")
LEASE_SECONDS = 4
"""The SimStack's operators' (``start_operator``)."""
TAKEN_OUT = {"Quarantined", "Draining", "Remediating", "Validating"}


def holder(api: client.ApiClient, lease: str) -> str:
    try:
        found = client.CoordinationV1Api(api).read_namespaced_lease(lease, NAMESPACE)
    except client.ApiException as error:
        if error.status == 404:
            return ""
        raise
    return str(found.spec.holder_identity or "")


def test_the_survivor_takes_the_dead_replicas_pool_over_and_its_own_never_stops(
    healthy_fleet: HealthyFleet, pitcrew: SimStack, api_client: client.ApiClient
) -> None:
    for name in OPERATORS:
        if name not in pitcrew.running or pitcrew.running[name].poll() is not None:
            pitcrew.running.pop(name, None)
            pitcrew.start_operator(name)
    first, second = healthy_fleet(size=2), healthy_fleet(size=2)
    leases = {fleet.group: pool_lease(CLUSTER, fleet.group) for fleet in (first, second)}

    def split() -> bool:
        holders = {holder(api_client, lease) for lease in leases.values()}
        return holders == set(OPERATORS)

    eventually(split, timeout=60, what="the two pools led by different replicas")
    pool_a, pool_b = (
        (first, second)
        if holder(api_client, leases[first.group]) == "operator-a"
        else (second, first)
    )
    lease_a, lease_b = leases[pool_a.group], leases[pool_b.group]
    dead, survivor = "operator-a", "operator-b"
    killed = time.monotonic()
    pitcrew.kill(dead)  # SIGKILL: no goodbye, no Lease given back
    pool_b.inject(pool_b.nodes[0], FATAL_XID)  # the survivor's own pool, meanwhile
    b_holders: set[str] = set()
    while holder(api_client, lease_a) != survivor:
        b_holders.add(holder(api_client, lease_b))
        assert time.monotonic() - killed < 60, "pool A never taken over"
        time.sleep(0.1)
    taken_over = time.monotonic() - killed
    timing = Timing(LEASE_SECONDS)
    print(f"pool {pool_a.group} taken over {taken_over:.2f} s after its leader was killed")
    # The product's promise: a candidate sees the last renewal within a retry period
    # and takes the Lease on its first turn once it stood still for the Lease duration;
    # two retry periods fit in the renew deadline.
    assert taken_over <= timing.lease + timing.renew_deadline
    assert b_holders == {survivor}  # pool B's Lease never moved
    # Taken out, as its history says: a simulated reset can be over, and the node
    # Healthy again, before the takeover is.
    eventually(
        lambda: TAKEN_OUT & set(pool_b.history(pool_b.nodes[0])), what="pool B's fault acted on"
    )
    node = pool_a.nodes[0]
    pool_a.inject(node, FATAL_XID)
    eventually(lambda: TAKEN_OUT & set(pool_a.history(node)), what="pool A's fault acted on")

    def said() -> bool:  # Events are posted in batches, a moment after the action
        return any(
            e.reason == "ShardTakenOver" and e.message.startswith(survivor) and dead in e.message
            for e in pool_a.events(pool_a.group, kind="GPUHealthPolicy")
        )

    eventually(said, timeout=30, what="the take-over's Event on policy A")
    pitcrew.start_operator(dead)

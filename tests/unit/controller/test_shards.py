"""A replica decides and acts only for the pools whose Lease it holds: another
replica's pool stays as it is in its cache, and a pool taken over is decided at once."""

from __future__ import annotations

from pitcrew.api.gpunode import Phase
from support.shell_fakes import Shell, healthy_status, policy_object

POLICY = policy_object(safety={"maxUnhealthy": 2})
NODES = ("n0", "n1", "n2")


def settled() -> Shell:
    shell = Shell(nodes={n: healthy_status() for n in NODES}, policy=POLICY)
    shell.settle()
    shell.cluster.calls.clear()
    return shell


def test_the_pools_are_campaigned_for_once_the_policies_are_known() -> None:
    assert settled().leadership.campaigned == ("fleet",)


def test_a_replica_leaves_a_pool_another_leads_as_it_is() -> None:
    shell = settled()
    shell.leadership.pools = set()  # another replica leads pool "fleet"
    shell.fail("n0")
    assert shell.round() == []
    assert shell.cluster.calls == []
    assert shell.phase("n0") is Phase.HEALTHY


def test_a_pool_taken_over_is_decided_at_once() -> None:
    shell = settled()
    shell.leadership.pools = set()
    shell.fail("n0")
    shell.round()
    shell.rounds.dirty.clear()
    shell.leadership.pools = {"fleet"}
    shell.rounds.taken_over("fleet")
    assert shell.rounds.dirty == set(NODES)
    shell.round(*sorted(shell.rounds.dirty))
    assert shell.phase("n0") is not Phase.HEALTHY  # taken out by its new leader


def test_a_plan_outliving_its_pools_lease_writes_nothing() -> None:
    shell = settled()
    shell.fail("n0")
    plans, _ = shell.rounds.plan(["n0"], shell.now)
    assert plans
    shell.leadership.pools = set()  # lost between the decision and its execution
    for plan in plans:
        shell.rounds.launch(plan)
    assert shell.cluster.calls == []
    assert shell.requeued


def test_nodes_of_no_policy_are_released_only_by_the_cluster_shards_holder() -> None:
    shell = settled()
    shell.fail("n0")
    shell.round()
    assert shell.store.nodes["n0"]["spec"].get("unschedulable")
    shell.cluster.calls.clear()
    del shell.store.policies["fleet"]
    shell.leadership.cluster = False
    shell.round("n0")
    assert shell.cluster.calls == []
    shell.leadership.cluster = True
    shell.round("n0")
    assert shell.cluster.calls

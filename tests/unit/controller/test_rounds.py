"""The round loop with fakes: sequential decisions, plans in flight, dry run."""

from __future__ import annotations

import asyncio
import copy
import datetime
from typing import Any

import pytest

from pitcrew.api.gpunode import Phase
from pitcrew.api.vocabulary import UNHEALTHY
from pitcrew.controller import rounds
from pitcrew.core.lifecycle import Decision
from pitcrew.core.rest import REST_MAX
from pitcrew.core.round import counted
from pitcrew.core.views import FleetView
from support.shell_fakes import (
    HeldPool,
    Shell,
    gpunode,
    healthy_status,
    node_object,
    policy_object,
    version,
)

NODES = [f"n{i}" for i in range(10)]


def settled_fleet(**kwargs: Any) -> Shell:
    policy = kwargs.pop("policy", None) or policy_object(safety={"maxUnhealthy": 1})
    shell = Shell(nodes={n: healthy_status() for n in NODES}, policy=policy, **kwargs)
    shell.settle()
    assert {shell.phase(n) for n in NODES} == {Phase.HEALTHY}
    shell.cluster.calls.clear()
    return shell


def test_failures_in_one_round_are_decided_one_after_another_under_max_unhealthy() -> None:
    shell = settled_fleet()
    for name in ("n1", "n4", "n7"):
        shell.fail(name)
    plans = shell.round()
    taken_out = [p.node for p in plans if p.decision.phase in UNHEALTHY]
    assert taken_out == ["n1"]  # in name order, the first failing node takes the one slot
    assert [shell.phase(n) for n in ("n4", "n7")] == [Phase.HEALTHY, Phase.HEALTHY]
    admitted = [
        c for n in ("n4", "n7") for c in shell.store.status(n).conditions if c.type == "Admitted"
    ]
    assert [c.reason for c in admitted] == ["CircuitBreakerOpen"] * 2
    assert {node for node, _ in shell.cluster.writes("edit_node")} == {"n1"}


def test_a_node_with_a_plan_in_flight_is_not_decided_again() -> None:
    pool = HeldPool()
    shell = settled_fleet(pool=pool)
    shell.fail("n2")
    assert [p.node for p in shell.round()] == ["n2"]
    assert shell.rounds.in_flight == {"n2"}
    shell.rounds.mark(["n2"])
    assert "n2" not in shell.rounds.next_batch()
    assert shell.round("n2") == []  # even when asked for directly
    pool.release()
    assert shell.rounds.in_flight == set()
    assert shell.rounds.intended == {}
    assert shell.phase("n2") in UNHEALTHY


def test_a_plan_in_flight_counts_with_its_intended_status_in_the_fleet() -> None:
    pool = HeldPool()
    shell = settled_fleet(pool=pool)
    shell.fail("n2")
    shell.round()
    assert shell.phase("n2") is Phase.HEALTHY  # nothing written yet
    assert shell.rounds.fleet("fleet").count(*UNHEALTHY) == 1
    shell.fail("n5")
    (second,) = shell.round("n5")
    assert second.decision.phase is Phase.HEALTHY  # refused: the slot is taken
    assert "CircuitBreakerOpen" in {c.reason for c in second.decision.status.conditions}


def test_a_node_coming_back_counts_as_out_until_its_plan_lands() -> None:
    """The breaker must hold against what the API has, not what a plan hopes for: a
    node whose way back (here: out of service to Healthy) is still in flight, or whose
    write will be refused, still fills its slot, so no other node is admitted in the
    meantime. Found by the chaos suite under a throttling apiserver: 5 nodes out with
    a limit of 4, each admission having counted 3."""
    shell = settled_fleet()
    shell.fail("n2")
    shell.round()
    assert shell.phase("n2") in UNHEALTHY
    # Its way back decided and in flight (the status the plan would write: Healthy).
    shell.rounds.in_flight.add("n2")
    shell.rounds.intended["n2"] = healthy_status()
    assert shell.rounds.fleet("fleet").count(*UNHEALTHY) == 1
    shell.fail("n5")
    (second,) = shell.round("n5")
    assert second.decision.phase is Phase.HEALTHY  # refused: the slot is not free yet
    assert "CircuitBreakerOpen" in {c.reason for c in second.decision.status.conditions}


def test_dry_run_writes_status_and_records_each_would_be_action_once() -> None:
    shell = settled_fleet(policy=policy_object(safety={"dryRun": True}))
    shell.fail("n3")
    for _ in range(4):
        shell.round()
    assert shell.cluster.writes("edit_node") == []
    assert shell.cluster.writes("evict") == []
    assert shell.remediator.requests == []
    dry = [
        (r, m)
        for ref, r, m, _ in shell.events.posted
        if ref.kind == "Node" and r.startswith("DryRun")
    ]
    assert dry, "dry run records what it would do"
    assert len(dry) == len(set(dry))
    assert "n3" in shell.cluster.writes("apply_gpunode_status")  # status shows the decision


def test_a_node_in_two_policies_is_managed_by_none_and_said_so_once() -> None:
    shell = Shell(nodes={n: healthy_status() for n in NODES}, policy=policy_object())
    other = policy_object()
    other["metadata"]["name"] = "overlap"
    shell.store.put("policy", other)
    assert shell.round() == []
    assert shell.round() == []
    conflicts = [ref.name for ref, r, _, _ in shell.events.posted if r == "PolicyConflict"]
    assert sorted(conflicts) == sorted(NODES)  # once per node, on the Node
    assert shell.cluster.calls == []


def test_without_any_policy_nothing_is_decided_or_written() -> None:
    shell = Shell(nodes={n: healthy_status() for n in NODES}, policy=policy_object())
    shell.store.put("policy", shell.store.policies["fleet"], deleted=True)
    assert shell.round() == []
    assert shell.cluster.calls == []


def test_nothing_is_decided_before_every_watched_kind_is_listed() -> None:
    shell = settled_fleet()
    shell.fail("n1")
    shell.rounds.primed = False  # as a new leader before its lists are in
    assert shell.round() == []
    shell.rounds.prime()
    assert {kind for kind, _ in shell.cluster.calls if kind == "list_objects"} == {"list_objects"}
    assert [k for c, k in shell.cluster.calls if c == "list_objects"] == [
        "policy",
        "node",
        "gpunode",
        "pod",
        "run",
    ]
    assert [p.node for p in shell.round()] == ["n1"]


def test_a_new_leader_resumes_a_drain_from_the_listed_status() -> None:
    shell = settled_fleet()
    shell.fail("n1")
    shell.settle()
    before = shell.store.status("n1")
    assert before.phase in UNHEALTHY
    # The new leader: nothing cached, only what the apiserver returns.
    for name in shell.store.gpunodes:
        shell.cluster.objects["gpunode"][name] = shell.store.gpunode(name) or {}
    successor = Shell(nodes={}, policy=policy_object(safety={"maxUnhealthy": 1}))
    successor.cluster.objects = shell.cluster.objects
    successor.rounds.primed = False
    successor.rounds.prime()
    after = successor.store.status("n1")
    assert after.phase is before.phase
    assert after.history == before.history
    assert after.remediations == before.remediations


def test_a_node_whose_status_does_not_parse_is_skipped_and_said_so_once() -> None:
    shell = settled_fleet()
    broken = shell.store.gpunode("n3")
    assert broken is not None
    broken["status"]["phase"] = "Rebooting"  # a phase of a newer schema
    broken["metadata"]["resourceVersion"] = "999999"
    shell.store.put("gpunode", dict(broken))
    assert "phase" in shell.store.unreadable("n3")
    for _ in range(2):
        assert "n3" not in {p.node for p in shell.round()}
    said = [m for ref, r, m, _ in shell.events.posted if r == "StatusUnreadable"]
    assert len(said) == 1  # once, on the Node
    assert "n3" not in shell.cluster.writes("apply_gpunode_status")


def test_a_node_whose_gpunode_exists_but_is_not_cached_waits_for_it() -> None:
    shell = settled_fleet()
    shell.store.put("gpunode", shell.store.gpunodes["n4"], deleted=True)
    asyncio.run(shell.rounds.reconcile(["n4"]))  # the create answers: it exists
    assert ("ensure_gpunode", "n4") in shell.cluster.calls
    assert "n4" not in shell.cluster.writes("apply_gpunode_status")


def test_a_policy_that_does_not_parse_stops_only_its_own_nodes() -> None:
    shell = settled_fleet()
    other = policy_object(nodeSelector={"matchLabels": {"pool": "b"}})
    other["metadata"]["name"] = "broken"
    other["spec"]["safety"] = {"maxUnhealty": 1}  # a typo the CRD would refuse; here it is stored
    other["status"] = {"breaker": {"open": False}, "cooldownUntil": "2026-12-01T12:30:00+00:00"}
    shell.store.put("policy", other)
    for name in ("b0", "b1"):
        obj = node_object(name)
        obj["metadata"]["labels"] = {"pool": "b"}
        shell.store.put("node", obj)
        shell.store.put("gpunode", gpunode(name, healthy_status()))
    shell.fail("n1")
    shell.fail("b0")
    for _ in range(3):
        plans = shell.round()
        assert not {p.node for p in plans} & {"b0", "b1"}
    shell.policy_status._pool.shutdown(wait=True)
    assert shell.phase("n1") in UNHEALTHY  # the good policy's nodes are decided as ever
    unreadable = [m for ref, r, m, _ in shell.events.posted if r == "PolicyUnreadable"]
    assert len(unreadable) == 1
    assert "maxUnhealty" in unreadable[0]
    (written,) = shell.cluster.policy_statuses["broken"]
    assert written["cooldownUntil"] == "2026-12-01T12:30:00+00:00"  # nothing forgotten
    (valid,) = [c for c in written["conditions"] if c["type"] == "Valid"]
    assert (valid["status"], valid["reason"]) == ("False", "SpecUnreadable")


def test_a_node_no_policy_manages_any_more_loses_pitcrews_marks() -> None:
    shell = settled_fleet()
    shell.fail("n1")
    shell.settle()
    assert shell.store.nodes["n1"]["spec"].get("unschedulable") is True
    relabelled = copy.deepcopy(shell.store.nodes["n1"])
    relabelled["metadata"]["labels"] = {"pool": "elsewhere"}
    relabelled["metadata"]["resourceVersion"] = version()
    shell.store.put("node", relabelled)
    shell.round("n1")
    released = shell.store.nodes["n1"]
    assert not released["spec"].get("unschedulable")
    assert not released["spec"].get("taints")
    assert "Unmanaged" in shell.events.reasons("Node")
    # What the status held of its way out goes too: a reset rung left there would keep
    # the node's agent from opening NVML again.
    left = shell.store.status("n1")
    assert (left.drain, left.remediation, left.reservation) == (None, None, None)


def test_a_cordon_someone_else_made_stays_when_no_policy_manages_the_node() -> None:
    shell = settled_fleet()
    theirs = copy.deepcopy(shell.store.nodes["n2"])
    theirs["metadata"]["labels"] = {"pool": "elsewhere"}
    theirs["spec"]["unschedulable"] = True
    theirs["metadata"]["resourceVersion"] = version()
    shell.store.put("node", theirs)
    shell.round("n2")
    assert shell.cluster.writes("edit_node") == []


def test_within_a_round_a_node_on_its_way_back_keeps_its_slot() -> None:
    """Found by the chaos suite under 429s: in one round a repaired node was decided
    back to Validating (its slot freed at once) and the next node admitted into that
    slot; the first node's write was refused, and 5 nodes were out with a limit of
    4. The way back counts only once it lands; a take-out counts at once."""
    fleet = FleetView(total=4, phases={Phase.REMEDIATING: 1, Phase.HEALTHY: 3})
    back = Decision(status=healthy_status().model_copy(update={"phase": Phase.VALIDATING}))
    remediating = healthy_status().model_copy(update={"phase": Phase.REMEDIATING})
    assert counted(fleet, node="n0", before=remediating, decision=back) == fleet
    out = Decision(status=remediating)
    after = counted(fleet, node="n1", before=healthy_status(), decision=out)
    assert after.count(*UNHEALTHY) == 2


def test_the_resync_skips_resting_nodes_until_their_time_or_their_pool_changes() -> None:
    shell = settled_fleet()
    shell.round()  # every node decided, nothing changed: all rest
    assert shell.rounds.due() == []
    shell.now += REST_MAX - datetime.timedelta(seconds=1)
    assert shell.rounds.due() == []
    shell.now += datetime.timedelta(seconds=1)
    assert sorted(shell.rounds.due()) == NODES  # five minutes at most


def test_a_fault_elsewhere_leaves_resting_nodes_resting_unless_spares_move() -> None:
    shell = settled_fleet()
    shell.round()
    shell.fail("n3")
    shell.settle()
    assert shell.phase("n3") in UNHEALTHY
    assert shell.rounds.due() == ["n3"]  # no spares to hold: nothing the others read moved
    holding = Shell(
        nodes={n: healthy_status() for n in NODES},
        policy=policy_object(safety={"maxUnhealthy": 1}, spares={"count": 2}),
    )
    holding.settle()
    holding.round()
    assert holding.rounds.due() == []
    healthy = [n for n in NODES if holding.phase(n) is Phase.HEALTHY]
    holding.fail(healthy[0])
    holding.round(healthy[0])  # one out: the pool wants one spare fewer
    assert set(holding.rounds.due()) >= set(healthy[1:])


def test_no_more_plans_are_handed_out_than_max_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rounds, "MAX_IN_FLIGHT", 2)
    pool = HeldPool()
    shell = settled_fleet(pool=pool, policy=policy_object(safety={"maxUnhealthy": 5}))
    for name in ("n1", "n4", "n7"):
        shell.fail(name)
    assert [p.node for p in shell.round()] == ["n1", "n4"]
    assert "n7" in shell.rounds.dirty  # not decided: it waits for room, not for a resync
    assert shell.rounds.next_batch() == set()  # nothing while the workers are full
    pool.release()
    assert "n7" in shell.rounds.next_batch()


def test_every_cordon_of_a_round_goes_out_before_any_plans_follow_up_writes() -> None:
    pool = HeldPool()
    shell = settled_fleet(pool=pool, policy=policy_object(safety={"maxUnhealthy": 5}))
    for name in ("n1", "n4", "n7"):
        shell.fail(name)
    shell.round()
    pool.release()
    writes = [(call, arg) for call, arg in shell.cluster.calls if call != "list_objects"]
    kinds = [call for call, _ in writes]
    cordons = [i for i, call in enumerate(kinds) if call == "edit_node"]
    statuses = [i for i, call in enumerate(kinds) if call == "apply_gpunode_status"]
    assert len(cordons) == 3
    assert len(statuses) == 3
    assert max(cordons) < min(statuses)
    assert {shell.phase(n) for n in ("n1", "n4", "n7")} <= set(UNHEALTHY)


def test_a_node_missing_from_a_new_listing_is_forgotten_as_deleted() -> None:
    shell = settled_fleet()
    shell.rounds.relisted("node", set(NODES) - {"n3"})
    assert "n3" not in shell.store.nodes
    assert "n4" in shell.store.nodes

"""The apiserver's eviction rules, case by case from ``EvictionREST.Create``
(Kubernetes ``pkg/registry/core/pod/storage/eviction.go``): which pods it deletes
without a budget's room, which it counts, which it always refuses."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from pitcrew.core.budgets import (
    MAX_DISRUPTED_PODS,
    Budget,
    BudgetLedger,
    Gate,
    budget,
    eviction_rule,
    plan_evictions,
)
from pitcrew.core.views import PodView
from support.shell_fakes import T0

APP = {"app": "llm"}
RUNNING = PodView(namespace="train", name="a", owner_kind="ReplicaSet")
CRASHING = replace(RUNNING, ready=False)
PENDING = replace(RUNNING, pending=True, ready=False)


def pdb(
    name: str = "llm",
    *,
    allowed: int = 0,
    current: int = 0,
    desired: int = 0,
    expected: int = 0,
    policy: str | None = None,
    generation: int = 1,
    observed: int = 1,
    disrupted: int = 0,
) -> Budget:
    spec: dict[str, Any] = {"selector": {"matchLabels": APP}}
    if policy is not None:
        spec["unhealthyPodEvictionPolicy"] = policy
    found = budget(
        {
            "metadata": {
                "namespace": "train",
                "name": name,
                "resourceVersion": "7",
                "generation": generation,
            },
            "spec": spec,
            "status": {
                "disruptionsAllowed": allowed,
                "currentHealthy": current,
                "desiredHealthy": desired,
                "expectedPods": expected,
                "observedGeneration": observed,
                "disruptedPods": {f"p{i}": "2026-01-01T00:00:00Z" for i in range(disrupted)},
            },
        }
    )
    assert found is not None
    return found


# minAvailable 2 of 2 pods, one of them crash-looping: 1 healthy, none allowed.
SHORT = {"allowed": 0, "current": 1, "desired": 2, "expected": 2}
# minAvailable 1 of 2 pods, one of them crash-looping: healthy as it is, none allowed.
HEALTHY = {"allowed": 0, "current": 1, "desired": 1, "expected": 2}


@pytest.mark.parametrize(
    ("pod", "budgets", "gate"),
    [
        # canIgnorePDB: Pending, Succeeded, Failed or being deleted, before any budget.
        (PENDING, [pdb(**SHORT)], Gate.FREE),
        (PENDING, [pdb(**SHORT), pdb("other")], Gate.FREE),
        (replace(RUNNING, finished=True), [pdb(**SHORT)], Gate.FREE),
        (replace(RUNNING, terminating=True), [pdb(**SHORT)], Gate.FREE),
        # No budget: deleted. More than one: refused, whatever they allow or the pod is.
        (RUNNING, [], Gate.FREE),
        (RUNNING, [pdb(allowed=5), pdb("other", allowed=5)], Gate.SEVERAL),
        (CRASHING, [pdb(policy="AlwaysAllow"), pdb("other")], Gate.SEVERAL),
        # One budget, an unready pod: AlwaysAllow lets it go whatever the budget's health.
        (CRASHING, [pdb(**SHORT, policy="AlwaysAllow")], Gate.FREE),
        # IfHealthyBudget (and no policy, its default): only while the budget is healthy.
        (CRASHING, [pdb(**HEALTHY, policy="IfHealthyBudget")], Gate.FREE),
        (CRASHING, [pdb(**HEALTHY)], Gate.FREE),
        (CRASHING, [pdb(**SHORT, policy="IfHealthyBudget")], Gate.BUDGET),
        (CRASHING, [pdb(**SHORT)], Gate.BUDGET),
        # desiredHealthy 0 (a budget whose controller has not counted yet): not healthy.
        (CRASHING, [pdb()], Gate.BUDGET),
        # A ready pod is counted, whatever the policy says of unready ones.
        (RUNNING, [pdb(**HEALTHY, policy="AlwaysAllow")], Gate.BUDGET),
    ],
    ids=[
        "pending",
        "pending-under-two-budgets",
        "finished",
        "terminating",
        "no-budget",
        "two-budgets",
        "unready-under-two-budgets",
        "unready-always-allow",
        "unready-if-healthy-budget-healthy",
        "unready-default-policy-healthy",
        "unready-if-healthy-budget-short",
        "unready-default-policy-short",
        "unready-budget-not-counted-yet",
        "ready-always-allow",
    ],
)
def test_the_apiserver_decides_each_eviction_in_the_order_of_its_source(
    pod: PodView, budgets: list[Budget], gate: Gate
) -> None:
    assert eviction_rule(pod, budgets).gate is gate


def test_a_budget_has_no_room_while_the_apiserver_refuses_every_eviction_it_counts() -> None:
    assert pdb(allowed=2).room == 2
    assert pdb(allowed=2, generation=3, observed=2).room == 0  # 429: still being processed
    assert pdb(allowed=-1).room == 0  # 403: disruptions allowed is negative
    assert pdb(allowed=2, disrupted=MAX_DISRUPTED_PODS).room == 2
    assert pdb(allowed=2, disrupted=MAX_DISRUPTED_PODS + 1).room == 0  # 403: map too big


def test_a_budget_that_wants_every_pod_it_expects_is_known_to_keep_them_all() -> None:
    assert pdb(current=3, desired=3, expected=3).keeps_every_pod  # maxUnavailable: 0
    assert not pdb(current=3, desired=2, expected=3).keeps_every_pod
    assert not pdb().keeps_every_pod  # nothing expected yet


def test_pods_the_apiserver_lets_go_are_evicted_at_once_and_take_no_room() -> None:
    pods = [
        replace(PENDING, name="pending"),
        replace(CRASHING, name="crashing"),
        replace(RUNNING, name="ready-0"),
        replace(RUNNING, name="ready-1"),
    ]
    labels = {p.key: APP for p in pods}
    plan = plan_evictions(pods, labels, [pdb(allowed=1, current=3, desired=2, expected=4)], {})
    assert [p.name for p in plan.now] == ["pending", "crashing", "ready-0"]
    assert plan.waiting == {"train/ready-1": "train/llm"}
    assert plan.covering == {
        "train/pending": (),
        "train/crashing": (),
        "train/ready-0": ("train/llm",),
    }


def test_a_crash_looping_pod_under_a_budget_that_allows_nothing_is_not_held_by_it() -> None:
    ledger = BudgetLedger()
    crashing = replace(CRASHING, name="crashing")
    budgets = [pdb(**SHORT, policy="AlwaysAllow")]
    plan = ledger.take([crashing], {crashing.key: APP}, budgets, shown={}, now=T0)
    assert plan.now == (crashing,)
    assert ledger.held == {}  # nothing held against the budget: it counted nothing


def test_a_pod_two_budgets_cover_is_never_asked_for_and_says_which() -> None:
    both = {"app": "llm", "tier": "gpu"}
    budgets = [pdb(allowed=3), replace(pdb("gpu", allowed=3), selector={"matchLabels": both})]
    plan = plan_evictions([RUNNING], {RUNNING.key: both}, budgets, {})
    assert plan.now == ()
    assert plan.waiting == {}
    assert plan.several == {"train/a": ("train/gpu", "train/llm")}


def test_a_wait_for_a_budget_that_keeps_every_pod_is_told_apart() -> None:
    keeps = pdb(current=2, desired=2, expected=2)
    plan = plan_evictions([RUNNING], {RUNNING.key: APP}, [keeps], {})
    assert plan.waiting == {"train/a": "train/llm"}
    assert plan.keeping == {"train/llm"}
    waits = plan_evictions([RUNNING], {RUNNING.key: APP}, [pdb(**HEALTHY)], {})
    assert waits.waiting == {"train/a": "train/llm"}  # a pod down: room when it is back
    assert waits.keeping == set()

"""A drain asks only for the evictions the PodDisruptionBudgets allow."""

from __future__ import annotations

import datetime
from typing import Any

from pitcrew.core.budgets import HELD_FOR, Budget, BudgetLedger, budget, plan_evictions
from pitcrew.core.views import PodView


def pods(*names: str, namespace: str = "train") -> list[PodView]:
    return [PodView(namespace=namespace, name=n, owner_kind="ReplicaSet") for n in names]


def pdb(name: str, allowed: int, labels: dict[str, str], version: str = "7") -> Budget:
    found = budget(
        {
            "metadata": {"namespace": "train", "name": name, "resourceVersion": version},
            "spec": {"selector": {"matchLabels": labels}},
            "status": {"disruptionsAllowed": allowed},
        }
    )
    assert found is not None
    return found


APP = {"app": "llm"}


def test_only_as_many_as_the_budget_allows_and_every_uncovered_pod() -> None:
    chosen = pods("a", "b", "c", "d")
    labels: dict[str, dict[str, str]] = {
        "train/a": APP,
        "train/b": APP,
        "train/c": APP,
        "train/d": {"app": "web"},
    }
    plan = plan_evictions(chosen, labels, [pdb("llm", 2, APP)], {})
    assert [p.name for p in plan.now] == ["a", "b", "d"]
    assert plan.waiting == {"train/c": "train/llm"}
    assert plan.covering == {"train/a": ("train/llm",), "train/b": ("train/llm",), "train/d": ()}


def test_evictions_held_against_a_budget_are_counted() -> None:
    plan = plan_evictions(
        pods("a", "b"), {"train/a": APP, "train/b": APP}, [pdb("llm", 2, APP)], {"train/llm": 2}
    )
    assert plan.now == ()
    assert set(plan.waiting) == {"train/a", "train/b"}


def test_a_pod_two_budgets_cover_is_refused_whatever_room_both_have() -> None:
    """The eviction API answers 500 for a pod under more than one budget."""
    both = {"app": "llm", "tier": "gpu"}
    budgets = [pdb("llm", 3, APP), pdb("gpu", 3, {"tier": "gpu"})]
    plan = plan_evictions(pods("a"), {"train/a": both}, budgets, {})
    assert plan.now == ()
    assert plan.several == {"train/a": ("train/gpu", "train/llm")}
    assert plan.covering == {}


def test_budgets_of_other_namespaces_and_selectorless_ones_cover_nothing() -> None:
    other = pods("a", namespace="serve")
    assert plan_evictions(other, {"serve/a": APP}, [pdb("llm", 0, APP)], {}).now == tuple(other)
    nothing: dict[str, Any] = {"metadata": {"namespace": "train", "name": "x"}, "spec": {}}
    assert budget(nothing) is None


T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
LABELS = {f"train/{name}": APP for name in "abcdef"}
NOTHING_SHOWN: dict[str, dict[str, int]] = {}


def listed(*pods: str, version: int) -> dict[str, dict[str, int]]:
    """What the store says budget ``train/llm``'s versions listed as disrupted."""
    return {"train/llm": dict.fromkeys(pods, version)}


def test_concurrent_drains_divide_a_budget_instead_of_each_asking_for_all_of_it() -> None:
    ledger = BudgetLedger()
    budgets = [pdb("llm", 2, APP)]
    first = ledger.take(pods("a", "b"), LABELS, budgets, shown=NOTHING_SHOWN, now=T0)
    second = ledger.take(pods("c", "d"), LABELS, budgets, shown=NOTHING_SHOWN, now=T0)
    assert [p.name for p in first.now] == ["a", "b"]
    assert second.now == ()  # asked before the first drain's answers came back
    assert set(second.waiting) == {"train/c", "train/d"}


def test_a_refused_eviction_gives_its_room_back_an_unanswered_one_keeps_it() -> None:
    ledger = BudgetLedger()
    budgets = [pdb("llm", 3, APP)]
    first = ledger.take(pods("a", "b", "c"), LABELS, budgets, shown=NOTHING_SHOWN, now=T0)
    # a accepted, b refused, c never answered (it may have been evicted)
    ledger.settle(first, undone={"train/b"})
    again = ledger.take(pods("b", "c", "d"), LABELS, budgets, shown=NOTHING_SHOWN, now=T0)
    assert [p.name for p in again.now] == ["b"]  # c is not asked for again, d waits
    assert set(again.waiting) == {"train/d"}


def test_an_accepted_eviction_is_held_until_a_newer_version_lists_its_pod() -> None:
    ledger = BudgetLedger()
    first = ledger.take(pods("a"), LABELS, [pdb("llm", 1, APP)], shown=NOTHING_SHOWN, now=T0)
    ledger.settle(first, undone=())
    # A newer version of the budget that does not list the pod yet: still held.
    later = [pdb("llm", 1, APP, version="8")]
    assert ledger.take(pods("b"), LABELS, later, shown=NOTHING_SHOWN, now=T0).now == ()
    shown = listed("a", version=8)
    assert [p.name for p in ledger.take(pods("b"), LABELS, later, shown=shown, now=T0).now] == ["b"]


def test_an_old_eviction_of_a_pod_by_the_same_name_frees_nothing() -> None:
    """A StatefulSet's ``worker-0`` evicted an hour ago is listed under the same name."""
    ledger = BudgetLedger()
    budgets = [pdb("llm", 1, APP, version="9")]
    first = ledger.take(pods("a"), LABELS, budgets, shown=listed("a", version=5), now=T0)
    ledger.settle(first, undone=())
    held = ledger.take(pods("b"), LABELS, budgets, shown=listed("a", version=9), now=T0)
    assert held.now == ()


def test_a_watch_that_never_lists_the_pod_holds_the_room_no_longer_than_held_for() -> None:
    ledger = BudgetLedger()
    budgets = [pdb("llm", 1, APP)]
    first = ledger.take(pods("a"), LABELS, budgets, shown=NOTHING_SHOWN, now=T0)
    ledger.settle(first, undone=())
    soon = T0 + HELD_FOR - datetime.timedelta(seconds=1)
    assert ledger.take(pods("b"), LABELS, budgets, shown=NOTHING_SHOWN, now=soon).now == ()
    late = ledger.take(pods("b"), LABELS, budgets, shown=NOTHING_SHOWN, now=T0 + HELD_FOR)
    assert [p.name for p in late.now] == ["b"]


def test_a_pod_whose_eviction_was_accepted_is_not_asked_for_again_while_it_terminates() -> None:
    ledger = BudgetLedger()
    budgets = [pdb("llm", 5, APP)]
    first = ledger.take(pods("a"), LABELS, budgets, shown=NOTHING_SHOWN, now=T0)
    ledger.settle(first, undone=())
    # The pod watch has not shown it terminating yet; the budget already lists it.
    shown = listed("a", version=8)
    again = ledger.take(pods("a", "b"), LABELS, budgets, shown=shown, now=T0)
    assert [p.name for p in again.now] == ["b"]
    late = T0 + HELD_FOR  # never deleted after all: asked for again
    after = ledger.take(pods("a"), LABELS, budgets, shown=NOTHING_SHOWN, now=late)
    assert [p.name for p in after.now] == ["a"]

"""A drain asks only for the evictions the PodDisruptionBudgets allow."""

from __future__ import annotations

from typing import Any

from pitcrew.core.budgets import Budget, budget, plan_evictions
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


def test_evictions_made_since_the_version_read_are_counted() -> None:
    plan = plan_evictions(
        pods("a", "b"), {"train/a": APP, "train/b": APP}, [pdb("llm", 2, APP)], {"train/llm": 2}
    )
    assert plan.now == ()
    assert set(plan.waiting) == {"train/a", "train/b"}


def test_a_pod_two_budgets_cover_needs_room_in_both() -> None:
    both = {"app": "llm", "tier": "gpu"}
    budgets = [pdb("llm", 3, APP), pdb("gpu", 0, {"tier": "gpu"})]
    plan = plan_evictions(pods("a"), {"train/a": both}, budgets, {})
    assert plan.now == ()
    assert plan.waiting == {"train/a": "train/gpu"}
    assert plan.covering == {}


def test_budgets_of_other_namespaces_and_selectorless_ones_cover_nothing() -> None:
    other = pods("a", namespace="serve")
    assert plan_evictions(other, {"serve/a": APP}, [pdb("llm", 0, APP)], {}).now == tuple(other)
    nothing: dict[str, Any] = {"metadata": {"namespace": "train", "name": "x"}, "spec": {}}
    assert budget(nothing) is None

"""Which jobs get series of their own: bounded, largest first, and stable."""

from __future__ import annotations

from pitcrew.core.job_tracking import tracked


def test_the_largest_jobs_fill_the_places() -> None:
    gpus = {"a": 8, "b": 64, "c": 16, "d": 1}
    assert tracked(frozenset(), gpus, limit=2) == {"b", "c"}


def test_a_tracked_job_keeps_its_place_against_a_similar_one() -> None:
    gpus = {"a": 8, "b": 12}
    assert tracked(frozenset({"a"}), gpus, limit=1) == {"a"}


def test_a_job_twice_the_size_of_the_smallest_displaces_it() -> None:
    gpus = {"a": 8, "b": 64, "big": 1024}
    assert tracked(frozenset({"a", "b"}), gpus, limit=2) == {"b", "big"}


def test_a_job_that_ended_frees_its_place() -> None:
    assert tracked(frozenset({"gone", "a"}), {"a": 8, "b": 1}, limit=2) == {"a", "b"}


def test_ten_thousand_labels_are_bounded() -> None:
    gpus = {f"tenant/job-{i}": 1 + i % 7 for i in range(10_000)}
    assert len(tracked(frozenset(), gpus, limit=200)) == 200

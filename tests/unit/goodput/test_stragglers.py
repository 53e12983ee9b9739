"""Stragglers: rank 0 sums its ranks' step times up, streaks of slow reports decide."""

from __future__ import annotations

import datetime

import pytest

from pitcrew.api.policy import StragglerSpec
from pitcrew.client.ranks import summarize
from pitcrew.core.job_ledger import Progress, RankTime
from pitcrew.core.stragglers import Streaks, slow_nodes

T0 = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
JOB = "train/llm"
SPEC = StragglerSpec()  # 20 % slower than the median, 3 reports in a row
NODES = {"n0": SPEC, "n1": SPEC, "n2": SPEC}


def report(second: int, *slow: tuple[str, float], median: float | None = 1.0) -> Progress:
    """Rank 0's report at ``T0 + second``: the median step time and the slowest nodes."""
    return Progress(
        step=second,
        time=T0 + datetime.timedelta(seconds=second),
        step_seconds=median,
        slowest=tuple(RankTime(node, seconds) for node, seconds in slow),
    )


def streak(*reports: Progress, spec: dict[str, StragglerSpec] = NODES) -> dict[str, str]:
    streaks = Streaks()
    for progress in reports:
        streaks.observe(JOB, progress, spec)
    return streaks.stragglers(spec)


# summarize (the client side)


def test_summarize_gives_the_median_and_the_slowest_nodes_first() -> None:
    median, slowest = summarize([1.0, 1.1, 3.0, 0.9, 1.2], ["a", "b", "c", "d", "e"])
    assert median == 1.1
    assert slowest == (
        RankTime("c", 3.0),
        RankTime("e", 1.2),
        RankTime("b", 1.1),
        RankTime("a", 1.0),
    )


def test_summarize_takes_each_nodes_slowest_rank() -> None:
    median, slowest = summarize([1.0, 2.0, 1.5, 1.1], ["a", "a", "b", "b"])
    assert median == pytest.approx(1.3)  # the median of the ranks, not of the nodes
    assert slowest == (RankTime("a", 2.0), RankTime("b", 1.5))


def test_summarize_keeps_as_many_nodes_as_asked() -> None:
    _, slowest = summarize([1.0, 2.0, 3.0, 4.0], ["a", "b", "c", "d"], keep=2)
    assert [r.node for r in slowest] == ["d", "c"]


def test_summarize_leaves_ranks_without_a_node_name_out_of_the_list_not_the_median() -> None:
    median, slowest = summarize([9.0, 1.0, 2.0], ["", "a", "b"])
    assert median == 2.0
    assert [r.node for r in slowest] == ["b", "a"]


@pytest.mark.parametrize(("seconds", "nodes"), [([1.0, 2.0], ["a"]), ([], [])])
def test_summarize_refuses_step_times_that_are_not_one_per_rank(
    seconds: list[float], nodes: list[str]
) -> None:
    with pytest.raises(ValueError, match="step times for"):
        summarize(seconds, nodes)


# slow_nodes and Streaks (the operator side)


def test_a_node_at_or_over_the_threshold_is_slow_below_it_is_not() -> None:
    found = slow_nodes(report(1, ("n0", 1.25), ("n2", 1.2), ("n1", 1.19)), NODES)
    assert sorted(found) == ["n0", "n2"]
    assert found["n0"] == pytest.approx(1.25)


def test_a_node_slow_in_one_report_less_than_asked_is_no_straggler() -> None:
    slow = [report(s, ("n0", 2.0)) for s in (1, 2, 3)]
    assert streak(*slow[:2]) == {}
    found = streak(*slow)
    assert list(found) == ["n0"]
    assert "2.00x" in found["n0"]
    assert "3 reports in a row" in found["n0"]
    assert JOB in found["n0"]


def test_a_single_slow_report_never_acts_even_at_the_lowest_setting() -> None:
    quick = {"n0": StragglerSpec(consecutive_reports=2)}
    assert streak(report(1, ("n0", 50.0)), spec=quick) == {}
    assert list(streak(report(1, ("n0", 50.0)), report(2, ("n0", 50.0)), spec=quick)) == ["n0"]


def test_a_report_that_does_not_name_the_node_breaks_its_streak() -> None:
    found = streak(
        report(1, ("n0", 2.0)),
        report(2, ("n0", 2.0)),
        report(3, ("n1", 2.0)),  # n0 at the median's pace, once
        report(4, ("n0", 2.0)),
        report(5, ("n0", 2.0)),
    )
    assert found == {}


def test_a_report_naming_the_node_below_the_threshold_breaks_its_streak() -> None:
    found = streak(
        report(1, ("n0", 2.0)),
        report(2, ("n0", 2.0)),
        report(3, ("n0", 1.1)),
        report(4, ("n0", 2.0)),
    )
    assert found == {}


def test_the_same_report_seen_again_counts_once() -> None:
    once = report(1, ("n0", 2.0))
    assert streak(once, once, once) == {}
    assert streak(once, report(2, ("n0", 2.0)), report(2, ("n0", 2.0))) == {}


def test_an_older_report_than_the_last_one_counts_not() -> None:
    assert streak(report(5, ("n0", 2.0)), report(3, ("n0", 2.0)), report(4, ("n0", 2.0))) == {}


def test_a_node_the_job_may_not_judge_is_ignored_though_named() -> None:
    """Only the job's own nodes in service are in the mapping: a report naming any
    other node (another tenant's, one out of service) takes nothing out."""
    slow = [report(s, ("elsewhere", 9.0), ("n0", 2.0)) for s in (1, 2, 3)]
    found = streak(*slow)
    assert list(found) == ["n0"]
    streaks = Streaks()
    for progress in slow:
        streaks.observe(JOB, progress, NODES)
    assert streaks.stragglers({**NODES, "elsewhere": SPEC}) == streaks.stragglers(NODES)


def test_a_node_no_longer_judged_is_no_straggler() -> None:
    streaks = Streaks()
    for second in (1, 2, 3):
        streaks.observe(JOB, report(second, ("n0", 2.0)), NODES)
    assert list(streaks.stragglers(NODES)) == ["n0"]
    assert streaks.stragglers({"n1": SPEC}) == {}  # n0 left service, or the job left n0


def test_a_report_without_step_times_neither_extends_nor_breaks_a_streak() -> None:
    untimed = [report(s, median=None) for s in (3, 4, 5)]
    assert streak(report(1, ("n0", 2.0)), report(2, ("n0", 2.0)), *untimed) == {}
    found = streak(report(1, ("n0", 2.0)), report(2, ("n0", 2.0)), *untimed, report(6, ("n0", 2.0)))
    assert list(found) == ["n0"]


def test_no_report_at_all_is_no_news() -> None:
    streaks = Streaks()
    streaks.observe(JOB, report(1, ("n0", 2.0)), NODES)
    streaks.observe(JOB, None, NODES)
    streaks.observe(JOB, report(2, ("n0", 2.0)), NODES)
    streaks.observe(JOB, report(3, ("n0", 2.0)), NODES)
    assert list(streaks.stragglers(NODES)) == ["n0"]


def test_a_disabled_setting_is_ignored() -> None:
    off = {"n0": StragglerSpec(enabled=False)}
    assert slow_nodes(report(1, ("n0", 9.0)), off) == {}
    assert streak(*(report(s, ("n0", 9.0)) for s in (1, 2, 3, 4)), spec=off) == {}


def test_each_node_has_its_policys_threshold_and_count() -> None:
    spec = {
        "strict": StragglerSpec(slower_than_median_percent=50, consecutive_reports=2),
        "loose": StragglerSpec(slower_than_median_percent=5, consecutive_reports=4),
    }
    slow = [report(s, ("strict", 1.4), ("loose", 1.06)) for s in (1, 2, 3)]
    assert streak(*slow, spec=spec) == {}  # strict: not slow enough; loose: not yet
    assert list(streak(*slow, report(4, ("loose", 1.06)), spec=spec)) == ["loose"]


def test_keep_forgets_the_jobs_that_are_over() -> None:
    streaks = Streaks()
    for second in (1, 2):
        streaks.observe(JOB, report(second, ("n0", 2.0)), NODES)
        streaks.observe("train/other", report(second, ("n1", 2.0)), NODES)
    streaks.keep({"train/other"})
    assert set(streaks.jobs) == {"train/other"}
    # The job comes back under the same name: its streak starts again.
    streaks.observe(JOB, report(3, ("n0", 2.0)), NODES)
    streaks.observe("train/other", report(3, ("n1", 2.0)), NODES)
    assert list(streaks.stragglers(NODES)) == ["n1"]


def test_streaks_are_per_job() -> None:
    """Two jobs on the same node (a shared node) each count their own reports."""
    streaks = Streaks()
    streaks.observe("train/a", report(1, ("n0", 2.0)), NODES)
    streaks.observe("train/b", report(2, ("n0", 2.0)), NODES)
    streaks.observe("train/a", report(3, ("n0", 2.0)), NODES)
    assert streaks.stragglers(NODES) == {}

"""Stragglers: rank 0 sums its ranks' step times up, streaks of slow reports decide."""

from __future__ import annotations

import datetime

import pytest

from pitcrew.api.policy import StragglerSpec
from pitcrew.client.ranks import LEARN, Paces
from pitcrew.core.job_ledger import Progress, RankTime
from pitcrew.core.stragglers import Streaks, slow_nodes

T0 = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
JOB = "train/llm"
SPEC = StragglerSpec()  # 20 % slower than the median, 3 reports in a row
NODES = {"n0": SPEC, "n1": SPEC, "n2": SPEC}


def report(
    second: int,
    *slow: tuple[str, float],
    median: float | None = 1.0,
    ranks: tuple[RankTime, ...] = (),
) -> Progress:
    """Rank 0's report at ``T0 + second``: the median step time and the slowest nodes
    (``slow``: without a usual time, judged against the median)."""
    return Progress(
        step=second,
        time=T0 + datetime.timedelta(seconds=second),
        step_seconds=median,
        slowest=ranks or tuple(RankTime(node, seconds) for node, seconds in slow),
    )


def streak(*reports: Progress, spec: dict[str, StragglerSpec] = NODES) -> dict[str, str]:
    streaks = Streaks()
    for progress in reports:
        streaks.observe(JOB, progress, spec)
    return streaks.stragglers(spec)


# Paces (the client side)

STAGES = ["stage0", "stage0", "stage1", "stage1", "stage2", "stage2", "stage3", "stage3"]
HEALTHY = [1.3, 1.3, 1.0, 1.0, 1.0, 1.0, 0.95, 0.95]
"""A 4-stage pipeline, two ranks a stage: stage 0 (the embedding) always 30 % slower
than the median, the last stage a little faster; every GPU healthy."""


def pipeline(gatherings: list[list[float]], roles: list[str] | None = None) -> dict[str, str]:
    """Rank 0 judges each gathering (:class:`Paces`), reports it, and the operator
    counts the reports (:class:`Streaks`): the stragglers found."""
    paces = Paces([f"n{r}" for r in range(len(STAGES))], roles or ())
    spec = {f"n{r}": SPEC for r in range(len(STAGES))}
    streaks = Streaks()
    for second, seconds in enumerate(gatherings):
        median, slowest = paces.judge(seconds)
        streaks.observe(JOB, report(second, median=median, ranks=slowest), spec)
    return streaks.stragglers(spec)


def slowed(factor: float, rank: int = 2, seconds: list[float] = HEALTHY) -> list[float]:
    return [s * factor if r == rank else s for r, s in enumerate(seconds)]


def test_a_pipeline_stage_that_is_always_slower_takes_no_healthy_node_out() -> None:
    """Issue 30: judged against the job's median, stage 0's healthy nodes were
    1.3x it in every report and taken out as stragglers."""
    assert pipeline([HEALTHY] * 20) == {}
    assert pipeline([HEALTHY] * 20, STAGES) == {}


def test_moe_ranks_of_uneven_but_steady_load_take_no_healthy_node_out() -> None:
    """Expert ranks whose tokens differ (routing), each steady up to a few per cent."""
    load = [1.0, 1.45, 0.8, 1.25, 1.0, 0.9, 1.6, 1.1]
    wobble = [[s * (1 + 0.02 * ((g + r) % 3 - 1)) for r, s in enumerate(load)] for g in range(30)]
    assert pipeline(wobble) == {}


def test_a_rank_that_becomes_slower_than_its_usual_is_found() -> None:
    """A GPU clock stuck low on a stage-1 node: 1.3x its own usual pace, which is still
    no slower than stage 0, so judged against the median it hid behind the stage."""
    found = pipeline([HEALTHY] * 6 + [slowed(1.3)] * 3)
    assert list(found) == ["n2"]
    assert "1.30x its usual step time" in found["n2"]


def test_a_straggler_never_becomes_its_own_usual() -> None:
    """However long the policy waits, a rank that stays slow stays behind its usual."""
    paces = Paces(["a", "b", "c"])
    for _ in range(6):
        paces.judge([1.0, 1.0, 1.0])
    for _ in range(200):
        _, slowest = paces.judge([1.0, 1.0, 1.5])
    assert slowest[0] == RankTime("c", 1.5, pytest.approx(1.0))


def test_a_slow_drift_is_followed() -> None:
    """MoE routing that shifts over training, a per cent every five gatherings (every
    two and a half minutes, at the hooks' 30 s): the job's shape, not a fault."""
    drift = [slowed(1.002**g) for g in range(300)]  # 1.8x by the end
    assert pipeline(drift) == {}


def test_without_roles_a_rank_is_judged_only_once_its_usual_is_learned() -> None:
    paces = Paces(["a", "b", "c"])
    for _ in range(1 + LEARN):  # the warm-up, then the gatherings that teach
        median, slowest = paces.judge([1.0, 1.0, 3.0])
        assert (median, slowest) == (1.0, ())
    _, slowest = paces.judge([1.0, 1.0, 3.0])
    assert RankTime("c", 3.0, 3.0) in slowest  # slow from the start: its usual


def test_with_roles_a_rank_slower_than_its_peers_from_the_start_is_found() -> None:
    """Ranks of one role keep one pace: one slow from the first step (a node already
    throttled when the job began) is judged against its peers at once."""
    seconds = slowed(1.6, rank=3)  # stage 1's second rank: 1.23x its role's median
    found = pipeline([seconds] * 4, STAGES)
    assert list(found) == ["n3"]
    assert pipeline([seconds] * 4) == {}  # without roles: the rank's usual


def test_the_warm_up_gathering_judges_nothing_even_with_roles() -> None:
    paces = Paces(["a", "b"], ["x", "x"])
    assert paces.judge([1.0, 9.0]) == (5.0, ())
    assert paces.judge([1.0, 2.0])[1][0] == RankTime("b", 2.0, 1.5)


def test_a_role_is_judged_against_its_own_median() -> None:
    """A step that makes one stage slower for all its ranks (a longer sequence in the
    embedding) is no rank's fault: each rank's peers slowed with it."""
    paces = Paces(["a", "b", "c", "d"], ["s0", "s0", "s1", "s1"])
    paces.judge([1.0, 1.0, 1.0, 1.0])
    _, slowest = paces.judge([2.0, 2.0, 1.0, 1.0])
    assert {r.node: r.usual_seconds for r in slowest} == {"a": 2.0, "b": 2.0, "c": 1.0, "d": 1.0}


def test_a_node_is_named_for_its_rank_furthest_behind_its_usual() -> None:
    paces = Paces(["a", "a", "b", "b"], ["x", "y", "x", "y"])
    paces.judge([1.0, 2.0, 1.0, 2.0])
    median, slowest = paces.judge([1.5, 2.0, 1.0, 2.4])
    assert median == pytest.approx(1.75)  # the median of the ranks, not of the nodes
    # a's first rank is 1.2x its peers' median (1.25), b's second 1.09x (2.2).
    assert slowest == (RankTime("a", 1.5, 1.25), RankTime("b", 2.4, 2.2))


def test_a_report_names_as_many_nodes_as_asked_furthest_behind_first() -> None:
    paces = Paces(["a", "b", "c", "d"], ["x"] * 4)
    paces.judge([1.0] * 4)
    _, slowest = paces.judge([1.0, 2.0, 3.0, 4.0], keep=2)
    assert [r.node for r in slowest] == ["d", "c"]


def test_ranks_without_a_node_name_are_left_out_of_the_list_not_the_median() -> None:
    paces = Paces(["", "a", "b"], ["x"] * 3)
    paces.judge([1.0] * 3)
    median, slowest = paces.judge([9.0, 1.0, 2.0])
    assert median == 2.0
    assert [r.node for r in slowest] == ["b", "a"]


@pytest.mark.parametrize(("seconds", "nodes"), [([1.0, 2.0], ["a"]), ([], [])])
def test_paces_refuse_step_times_that_are_not_one_per_rank(
    seconds: list[float], nodes: list[str]
) -> None:
    with pytest.raises(ValueError, match="step times for"):
        Paces(nodes).judge(seconds)


def test_paces_refuse_roles_that_are_not_one_per_rank() -> None:
    with pytest.raises(ValueError, match="roles for"):
        Paces(["a", "b"], ["x"])


# slow_nodes and Streaks (the operator side)


def test_a_node_at_or_over_the_threshold_is_slow_below_it_is_not() -> None:
    found = slow_nodes(report(1, ("n0", 1.25), ("n2", 1.2), ("n1", 1.19)), NODES)
    assert sorted(found) == ["n0", "n2"]
    assert found["n0"] == pytest.approx(1.25)


def test_a_node_is_judged_against_its_usual_time_where_the_report_names_one() -> None:
    ranks = (RankTime("n0", 1.5, 1.3), RankTime("n1", 1.5, 1.2), RankTime("n2", 1.1))
    found = slow_nodes(report(1, ranks=ranks), NODES)
    assert found == {"n1": pytest.approx(1.25)}  # n0: 1.15x its usual; n2: the median's


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

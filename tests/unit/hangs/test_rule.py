"""The hang rule: a job whose pods run and whose ranks all stopped stepping, blamed on
the evidence there is."""

from __future__ import annotations

import datetime

import pytest

from pitcrew.api.policy import HangSpec
from pitcrew.core.hangs import Blame, Heartbeat, RankPod, judge

T0 = datetime.datetime(2026, 12, 2, 10, 0, tzinfo=datetime.UTC)
SPEC = HangSpec()  # 10x the step time, at least 60 s; pauses up to 30 min
STEP = 2.0
"""Seconds a step: 10x is 20 s, under the 60 s floor."""


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def rank(
    index: int,
    step: int,
    when: float,
    *,
    node: str = "",
    running: bool = True,
    step_seconds: float | None = STEP,
    paused: float | None = None,
    beat: float | None = None,
    finished: bool = False,
) -> RankPod:
    return RankPod(
        key=f"train/llm-{index}",
        node=node or f"gpu-{index}",
        running=running,
        heartbeat=Heartbeat(
            rank=index * 8,
            step=step,
            time=at(when),
            step_seconds=step_seconds,
            paused_since=None if paused is None else at(paused),
            beat=None if beat is None else at(beat),
            finished=finished,
        ),
    )


def hung(pods: list[RankPod], now: float, **evidence: dict[str, str]) -> Blame | None:
    verdict = judge(
        "train/llm",
        pods,
        SPEC,
        now=at(now),
        findings=evidence.get("findings", {}),
        stragglers=evidence.get("stragglers", {}),
    )
    return None if verdict.hang is None else verdict.hang.blame


def test_a_job_that_steps_is_not_hung_and_is_looked_at_again_when_it_would_be() -> None:
    pods = [rank(0, 100, 0), rank(1, 100, 0)]
    verdict = judge("train/llm", pods, SPEC, now=at(30), findings={}, stragglers={})
    assert verdict.hang is None
    assert verdict.wake_at == at(60)


def test_the_rank_that_stopped_reporting_first_is_the_one_blamed() -> None:
    # Every rank finished step 1000 at 40 s; rank 1's process froze at 45 s, the others
    # wait in the next collective and go on reporting.
    pods = [rank(0, 1000, 40, beat=98), rank(1, 1000, 40, beat=45), rank(2, 1000, 40, beat=99)]
    verdict = judge("train/llm", pods, SPEC, now=at(101), findings={}, stragglers={})
    assert verdict.hang is not None
    assert verdict.hang.blame is Blame.SILENT_FIRST
    assert list(verdict.hang.culprits) == ["gpu-1"]
    assert "rank 8 (pod train/llm-1) stopped reporting first" in verdict.hang.culprits["gpu-1"]


def test_ranks_all_silent_tell_nothing_of_who_stopped_first() -> None:
    pods = [rank(0, 1000, 40, beat=41), rank(1, 1000, 40, beat=40)]
    assert hung(pods, 120) is Blame.NOBODY


def test_a_job_whose_training_ended_is_not_judged() -> None:
    pods = [rank(0, 1000, 40, finished=True), rank(1, 1000, 40)]
    assert hung(pods, 3600) is None


def test_one_rank_stopped_first_is_the_one_blamed() -> None:
    pods = [rank(0, 1000, 40), rank(1, 998, 36), rank(2, 1000, 40)]
    assert hung(pods, 99) is None
    verdict = judge("train/llm", pods, SPEC, now=at(101), findings={}, stragglers={})
    assert verdict.hang is not None
    assert verdict.hang.blame is Blame.STOPPED_FIRST
    assert list(verdict.hang.culprits) == ["gpu-1"]
    assert "rank 8 (pod train/llm-1) stopped first, at step 998" in verdict.hang.culprits["gpu-1"]
    assert verdict.hang.last_step == at(40)


def test_all_ranks_stopped_at_once_blame_no_node_but_the_job_is_hung() -> None:
    pods = [rank(0, 1000, 40), rank(1, 1000, 40)]
    verdict = judge("train/llm", pods, SPEC, now=at(101), findings={}, stragglers={})
    assert verdict.hang is not None
    assert verdict.hang.blame is Blame.NOBODY
    assert verdict.hang.culprits == {}


def test_ranks_stopped_first_on_several_nodes_blame_none_of_them() -> None:
    pods = [rank(0, 1000, 40), rank(1, 998, 36), rank(2, 998, 36)]
    assert hung(pods, 101) is Blame.NOBODY


def test_with_no_rank_first_a_node_with_a_finding_is_blamed() -> None:
    pods = [rank(0, 1000, 40), rank(1, 1000, 40)]
    assert hung(pods, 101, findings={"gpu-1": "XidApplication"}) is Blame.FINDING


def test_with_no_rank_first_nor_finding_a_known_straggler_is_blamed() -> None:
    pods = [rank(0, 1000, 40), rank(1, 1000, 40)]
    why = {"gpu-0": "the straggler of job train/llm", "gpu-9": "another job's"}
    verdict = judge("train/llm", pods, SPEC, now=at(101), findings={}, stragglers=why)
    assert verdict.hang is not None
    assert verdict.hang.blame is Blame.STRAGGLER
    assert list(verdict.hang.culprits) == ["gpu-0"]  # only the job's own nodes


def test_a_finding_on_another_jobs_node_blames_nothing() -> None:
    pods = [rank(0, 1000, 40), rank(1, 1000, 40)]
    assert hung(pods, 101, findings={"gpu-9": "XidFellOffBus"}) is Blame.NOBODY


def test_a_checkpoint_pause_longer_than_the_stall_is_no_hang() -> None:
    pods = [rank(0, 1000, 40, paused=41), rank(1, 1000, 40)]
    assert hung(pods, 600) is None
    verdict = judge("train/llm", pods, SPEC, now=at(600), findings={}, stragglers={})
    assert verdict.wake_at == at(41) + SPEC.max_pause


def test_a_pause_past_max_pause_is_a_hang() -> None:
    pods = [rank(0, 1000, 40, paused=41), rank(1, 1000, 40)]
    assert hung(pods, 41 + SPEC.max_pause.total_seconds() + 1) is Blame.NOBODY


def test_a_pod_restarted_since_the_last_step_is_starting_not_hung() -> None:
    restarted = RankPod(
        key="train/llm-1",
        node="gpu-1",
        running=True,
        heartbeat=rank(1, 1000, 40).heartbeat,
        started_at=at(50),  # its container restarted; the heartbeat is its last life's
    )
    assert hung([rank(0, 1000, 40), restarted], 3600) is None


def test_pods_not_all_running_are_not_judged() -> None:
    pods = [rank(0, 1000, 40), rank(1, 990, 20, running=False)]
    assert judge("train/llm", pods, SPEC, now=at(3600), findings={}, stragglers={}).hang is None


def test_a_job_warming_up_has_no_step_time_and_is_not_judged() -> None:
    pods = [rank(0, 1, 40, step_seconds=None), rank(1, 1, 40, step_seconds=None)]
    assert hung(pods, 3600) is None


def test_a_slow_job_stalls_for_its_step_time_multiple_not_the_floor() -> None:
    pods = [rank(0, 100, 0, step_seconds=30.0), rank(1, 100, 0, step_seconds=30.0)]
    assert hung(pods, 299) is None  # 10 x 30 s
    assert hung(pods, 301) is Blame.NOBODY


def test_a_rank_without_heartbeat_is_judged_by_the_others_and_never_blamed() -> None:
    silent = RankPod(key="train/llm-1", node="gpu-1", running=True)
    assert hung([rank(0, 100, 0), silent], 61) is Blame.NOBODY


@pytest.mark.parametrize("enabled", [True, False])
def test_a_policy_can_turn_hang_detection_off(enabled: bool) -> None:
    spec = HangSpec(enabled=enabled)
    pods = [rank(0, 100, 0), rank(1, 100, 0)]
    verdict = judge("train/llm", pods, spec, now=at(3600), findings={}, stragglers={})
    assert (verdict.hang is not None) is enabled

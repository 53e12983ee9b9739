"""Every pod's heartbeat: written by its first rank with the reporter's own discipline
(rate-limited, bounded, never raising), its step time measured between writes, a pause
written at once and ended by the next step, the last step written even if none follows."""

from __future__ import annotations

import datetime
import threading
import time
from typing import Any

import pytest

from pitcrew.api.vocabulary import HEARTBEAT_ANNOTATION, PROGRESS_ANNOTATION
from pitcrew.client.background import BackgroundReporter
from pitcrew.client.progress import (
    MalformedProgressError,
    ProgressReporter,
    encode_heartbeat,
    parse_heartbeat,
)
from pitcrew.core.hangs import Heartbeat

T0 = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)


class Pods:
    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []
        self.wrote = threading.Event()

    def patch_namespaced_pod(
        self, name: str, namespace: str, body: dict[str, Any], _request_timeout: object = None
    ) -> None:
        self.patches.append(body)
        self.wrote.set()

    def beats(self) -> list[Heartbeat]:
        return [
            parse_heartbeat(p["metadata"]["annotations"][HEARTBEAT_ANNOTATION])
            for p in self.patches
        ]


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime.datetime:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)


def test_a_heartbeat_round_trips() -> None:
    beat = Heartbeat(
        rank=8, step=1200, time=T0, step_seconds=1.9, paused_since=T0, beat=T0, finished=True
    )
    assert parse_heartbeat(encode_heartbeat(beat)) == beat
    bare = Heartbeat(rank=0, step=1, time=T0)
    assert parse_heartbeat(encode_heartbeat(bare)) == bare


@pytest.mark.parametrize(
    "text",
    [
        '{"rank": 1, "time": "2026-12-01T12:00:00Z"}',
        '{"rank": 1, "step": 2, "time": 3}',
        "[]",
        "x" * 5000,
    ],
)
def test_a_malformed_heartbeat_says_what_is_wrong(text: str) -> None:
    with pytest.raises(MalformedProgressError, match=HEARTBEAT_ANNOTATION):
        parse_heartbeat(text)


def test_rank_0_writes_its_heartbeat_with_its_progress_and_measures_its_step_time() -> None:
    pods, clock = Pods(), Clock()
    reporter = ProgressReporter(pod="p", namespace="ns", api=pods, min_interval=0, clock=clock)
    assert reporter.step(10)
    clock.tick(20)
    assert reporter.step(20)
    assert all(PROGRESS_ANNOTATION in p["metadata"]["annotations"] for p in pods.patches)
    first, second = pods.beats()
    assert (first.rank, first.step, first.time, first.step_seconds) == (0, 10, T0, None)
    assert (second.step, second.step_seconds) == (20, 2.0)


def test_another_pods_first_rank_writes_only_its_heartbeat() -> None:
    pods = Pods()
    reporter = ProgressReporter(
        pod="p1", namespace="ns", api=pods, min_interval=0, clock=Clock(), rank=8, progress=False
    )
    assert reporter.step(3)
    [patch] = pods.patches
    assert list(patch["metadata"]["annotations"]) == [HEARTBEAT_ANNOTATION]
    assert pods.beats()[0].rank == 8


def test_a_pause_is_written_at_once_and_the_next_step_ends_it() -> None:
    pods, clock = Pods(), Clock()
    reporter = ProgressReporter(pod="p", namespace="ns", api=pods, min_interval=3600, clock=clock)
    assert reporter.step(10)
    clock.tick(5)
    assert reporter.pause()  # not held by the rate limit
    clock.tick(600)  # the checkpoint takes ten minutes
    reporter.step(11)
    reporter.checkpoint(11)
    _, paused, after = pods.beats()
    assert paused.paused_since == T0 + datetime.timedelta(seconds=5)
    assert after.paused_since is None
    assert after.step_seconds is None  # the pause is no step time


def test_the_end_of_training_is_written_at_once() -> None:
    pods = Pods()
    reporter = ProgressReporter(pod="p", namespace="ns", api=pods, min_interval=3600, clock=Clock())
    assert reporter.step(10)
    assert reporter.finish()
    assert [b.finished for b in pods.beats()] == [False, True]


def test_beats_go_on_while_no_step_comes_and_stop_when_training_ends() -> None:
    pods = Pods()
    reporter = BackgroundReporter(pod="p", namespace="ns", api=pods, min_interval=0.1)
    reporter.step(1)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and len(pods.patches) < 3:
        time.sleep(0.05)
    beats = pods.beats()
    assert len(beats) >= 3
    assert {b.step for b in beats} == {1}  # the same step, beat after beat
    assert beats[-1].beat is not None
    assert beats[0].beat is not None
    assert beats[-1].beat > beats[0].beat
    reporter.finish()
    assert reporter.flush(5)
    ended = len(pods.patches)
    time.sleep(0.5)
    assert len(pods.patches) == ended
    assert pods.beats()[-1].finished


def test_the_last_step_held_by_the_rate_limit_is_written_though_no_step_follows() -> None:
    pods = Pods()
    reporter = BackgroundReporter(pod="p", namespace="ns", api=pods, min_interval=0.3)
    reporter.step(1)
    assert pods.wrote.wait(5)
    pods.wrote.clear()
    reporter.step(2)  # held back: within the interval of the first write
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and [b.step for b in pods.beats()] != [1, 2]:
        time.sleep(0.05)
    assert [b.step for b in pods.beats()] == [1, 2]


def test_a_pause_after_a_step_held_back_is_kept_by_the_beats_that_follow() -> None:
    pods = Pods()
    reporter = BackgroundReporter(pod="p", namespace="ns", api=pods, min_interval=0.2)
    reporter.step(1)
    assert pods.wrote.wait(5)
    reporter.step(2)  # held back by the rate limit
    reporter.pause()  # a checkpoint begins
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and len(pods.patches) < 5:
        time.sleep(0.05)
    after = pods.beats()[1:]
    assert len(after) >= 3
    assert all(b.paused_since is not None for b in after), after
    assert {b.step for b in after} == {2}

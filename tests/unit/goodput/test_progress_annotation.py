"""The progress annotation: written by the client, read by the operator, typos survive."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from pitcrew.api.vocabulary import PROGRESS_ANNOTATION
from pitcrew.client.progress import (
    MalformedProgressError,
    ProgressReporter,
    decode,
    encode,
    parse,
)
from pitcrew.core.job_ledger import Progress

T0 = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)


class Pods:
    def __init__(self, *, fail: bool = False) -> None:
        self.patches: list[dict[str, Any]] = []
        self.fail = fail

    def patch_namespaced_pod(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        if self.fail:
            raise ConnectionError("apiserver unreachable")
        self.patches.append(body)


def test_round_trip() -> None:
    progress = Progress(
        step=1200, time=T0, checkpoint_step=1000, checkpoint_time=T0, flops_per_step=1e15
    )
    assert decode(encode(progress)) == progress


def test_hand_written_annotation_with_z_times() -> None:
    found = decode(
        '{"step": 5, "time": "2026-12-01T12:00:00Z", "checkpointTime": "2026-12-01T11:50:00Z"}'
    )
    assert found is not None
    assert found.checkpoint_time == T0 - datetime.timedelta(minutes=10)


def test_malformed_annotations_are_ignored() -> None:
    assert decode("not json") is None
    assert decode('{"time": "2026-12-01T12:00:00Z"}') is None
    assert decode('{"step": "x", "time": "2026-12-01T12:00:00Z"}') is None
    assert decode(None) is None


def test_steps_are_rate_limited_checkpoints_are_not() -> None:
    pods = Pods()
    reporter = ProgressReporter(
        pod="p", namespace="ns", api=pods, min_interval=3600, clock=lambda: T0
    )
    assert reporter.step(1)
    assert not reporter.step(2)
    assert reporter.checkpoint(2)
    last = decode(pods.patches[-1]["metadata"]["annotations"][PROGRESS_ANNOTATION])
    assert last is not None
    assert (last.step, last.checkpoint_step) == (2, 2)


def test_a_failed_write_never_raises_into_the_training_loop() -> None:
    reporter = ProgressReporter(pod="p", namespace="ns", api=Pods(fail=True), clock=lambda: T0)
    assert not reporter.step(1)
    assert not reporter.checkpoint(1)


def test_an_oversized_or_broken_annotation_says_what_is_wrong() -> None:
    with pytest.raises(MalformedProgressError, match="is 5000 bytes, over the 4096"):
        parse("x" * 5000)
    with pytest.raises(MalformedProgressError, match="has no 'step'"):
        parse('{"time": "2026-12-01T12:00:00Z"}')
    with pytest.raises(MalformedProgressError, match="is not a progress report"):
        parse("{not json")

"""The progress annotation: written by the client, read by the operator, typos survive."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any

import pytest

from pitcrew.api.vocabulary import PROGRESS_ANNOTATION
from pitcrew.client.progress import (
    MAX_SLOWEST,
    RETRY_FIRST,
    RETRY_MAX,
    WRITE_TIMEOUT,
    MalformedProgressError,
    ProgressReporter,
    decode,
    encode,
    parse,
)
from pitcrew.core.job_ledger import Progress, RankTime

T0 = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)


class Pods:
    def __init__(self, *, fail: bool = False) -> None:
        self.patches: list[dict[str, Any]] = []
        self.fail = fail
        self.tries = 0
        self.timeouts: list[object] = []

    def patch_namespaced_pod(
        self, name: str, namespace: str, body: dict[str, Any], _request_timeout: object = None
    ) -> None:
        self.tries += 1
        self.timeouts.append(_request_timeout)
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


# Step times and the slowest nodes (stragglers)

TIMING = (1.5, (RankTime("gpu-node-0007", 2.25, 1.8), RankTime("gpu-node-0003", 1.6)))


def test_step_times_and_the_slowest_nodes_round_trip() -> None:
    progress = Progress(step=7, time=T0, step_seconds=TIMING[0], slowest=TIMING[1])
    text = encode(progress)
    assert '"stepSeconds":1.5' in text
    assert '"slowest":[{"node":"gpu-node-0007","stepSeconds":2.25,"usualSeconds":1.8}' in text
    assert '{"node":"gpu-node-0003","stepSeconds":1.6}' in text  # no usual pace: the median
    assert parse(text) == progress


def test_a_report_without_step_times_writes_none() -> None:
    text = encode(Progress(step=7, time=T0))
    assert "stepSeconds" not in text
    assert "slowest" not in text
    assert parse(text).slowest == ()


def with_timing(**fields: Any) -> str:
    return json.dumps({"step": 1, "time": "2026-12-01T12:00:00Z", **fields})


@pytest.mark.parametrize(
    "fields",
    [
        {"stepSeconds": -1},
        {"stepSeconds": 0},
        {"stepSeconds": "inf"},
        {"stepSeconds": "nan"},
        {"stepSeconds": "fast"},
        {"stepSeconds": 1, "slowest": [{"node": "a", "stepSeconds": -2}]},
        {"stepSeconds": 1, "slowest": [{"node": "a", "stepSeconds": 0}]},
        {"stepSeconds": 1, "slowest": [{"node": "a", "stepSeconds": "Infinity"}]},
        {"stepSeconds": 1, "slowest": [{"node": "a", "stepSeconds": "NaN"}]},
        {"stepSeconds": 1, "slowest": [{"node": "a"}]},
        {"stepSeconds": 1, "slowest": [{"node": "a", "stepSeconds": 2, "usualSeconds": 0}]},
        {"stepSeconds": 1, "slowest": [{"node": "a", "stepSeconds": 2, "usualSeconds": "x"}]},
        {"stepSeconds": 1, "slowest": [{"stepSeconds": 2}]},
        {"stepSeconds": 1, "slowest": [{"node": "", "stepSeconds": 2}]},
        {"stepSeconds": 1, "slowest": [{"node": 7, "stepSeconds": 2}]},
        {"stepSeconds": 1, "slowest": [{"node": "n" * 254, "stepSeconds": 2}]},
        {"stepSeconds": 1, "slowest": ["gpu-node-0001"]},
        {"stepSeconds": 1, "slowest": {"node": "a", "stepSeconds": 2}},
        {"stepSeconds": 1, "slowest": [{"node": f"n{i}", "stepSeconds": 2} for i in range(9)]},
    ],
    ids=repr,
)
def test_bad_step_times_or_slowest_nodes_are_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(MalformedProgressError, match="is not a progress report"):
        parse(with_timing(**fields))


def test_raw_json_infinity_and_nan_are_refused() -> None:
    """Python's json reads the bare words, which no JSON writer should send."""
    for word in ("Infinity", "-Infinity", "NaN"):
        with pytest.raises(MalformedProgressError):
            parse(with_timing(stepSeconds=1)[:-1] + f', "slowest": [], "stepSeconds": {word}}}')


def test_the_most_nodes_and_the_longest_name_allowed_are_read() -> None:
    slowest = [{"node": f"{i}" + "n" * 252, "stepSeconds": 2} for i in range(MAX_SLOWEST)]
    found = parse(with_timing(stepSeconds=1, slowest=slowest))
    assert len(found.slowest) == MAX_SLOWEST == 8
    assert len(found.slowest[0].node) == 253


def annotation(patch: dict[str, Any]) -> Progress:
    return parse(patch["metadata"]["annotations"][PROGRESS_ANNOTATION])


def test_the_ranks_timing_is_sent_in_one_write_not_the_next() -> None:
    pods = Pods()
    reporter = ProgressReporter(pod="p", namespace="ns", api=pods, min_interval=0, clock=lambda: T0)
    assert reporter.step(1, ranks=TIMING)
    assert reporter.step(2)
    assert reporter.checkpoint(2)
    first, second, third = (annotation(p) for p in pods.patches)
    assert (first.step_seconds, first.slowest) == TIMING
    assert (second.step_seconds, second.slowest) == (None, ())
    assert (third.step_seconds, third.slowest) == (None, ())


def test_timing_held_by_the_rate_limit_goes_with_the_next_write() -> None:
    pods = Pods()
    reporter = ProgressReporter(
        pod="p", namespace="ns", api=pods, min_interval=3600, clock=lambda: T0
    )
    assert reporter.step(1)
    assert not reporter.step(2, ranks=TIMING)  # not written: rate-limited
    assert reporter.checkpoint(2)
    assert reporter.checkpoint(3)
    held, after = (annotation(p) for p in pods.patches[1:])
    assert (held.step_seconds, held.slowest) == TIMING
    assert after.step_seconds is None


def test_the_latest_timing_replaces_one_not_yet_sent() -> None:
    pods = Pods()
    reporter = ProgressReporter(
        pod="p", namespace="ns", api=pods, min_interval=3600, clock=lambda: T0
    )
    assert reporter.step(1)
    newer = (1.0, (RankTime("gpu-node-0001", 1.1),))
    reporter.step(2, ranks=TIMING)
    reporter.step(3, ranks=newer)
    assert reporter.checkpoint(3)
    assert (annotation(pods.patches[-1]).step_seconds, annotation(pods.patches[-1]).slowest) == (
        newer
    )


def test_a_failed_write_keeps_the_timing_for_the_next_one() -> None:
    pods = Pods(fail=True)
    now = [0.0]
    reporter = ProgressReporter(
        pod="p", namespace="ns", api=pods, min_interval=0, clock=lambda: T0, timer=lambda: now[0]
    )
    assert not reporter.step(1, ranks=TIMING)
    pods.fail = False
    now[0] += RETRY_FIRST
    assert reporter.step(2)
    assert reporter.step(3)
    sent, after = (annotation(p) for p in pods.patches)
    assert (sent.step, sent.step_seconds, sent.slowest) == (2, *TIMING)
    assert after.step_seconds is None


def test_flops_measured_as_the_job_goes_are_reported() -> None:
    pods = Pods()
    reporter = ProgressReporter(
        pod="p",
        namespace="ns",
        api=pods,
        min_interval=0,
        flops_per_step=1e15,
        parameters=7,
        tokens_per_step=9,
        clock=lambda: T0,
    )
    reporter.flops(2e15)
    assert reporter.step(1)
    sent = annotation(pods.patches[-1])
    assert (sent.flops_per_step, sent.parameters, sent.tokens_per_step) == (2e15, 7, 9)


def test_while_writes_fail_the_training_loop_is_held_once_per_backoff_not_every_step() -> None:
    """An apiserver out of reach: a write is tried once, then again after the backoff
    (doubling), never on every step of the loop; a checkpoint waits for the next try."""
    pods = Pods(fail=True)
    now = [0.0]
    reporter = ProgressReporter(
        pod="p", namespace="ns", api=pods, min_interval=0, clock=lambda: T0, timer=lambda: now[0]
    )
    for step in range(1000):
        reporter.step(step)
    assert not reporter.checkpoint(1000)
    assert pods.tries == 1
    now[0] += RETRY_FIRST
    reporter.step(1001)
    now[0] += RETRY_FIRST  # the second wait is twice the first
    reporter.step(1002)
    assert pods.tries == 2
    now[0] += RETRY_MAX
    pods.fail = False
    assert reporter.step(1003)
    sent = annotation(pods.patches[-1])
    assert (sent.step, sent.checkpoint_step) == (1003, 1000)
    assert set(pods.timeouts) == {WRITE_TIMEOUT}


def test_under_slurm_a_failing_scontrol_is_not_forked_on_every_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's comment is written with scontrol: slurmctld out of reach must not
    cost a fork and a failed RPC on every training step."""
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "calls"}\nexit 1\n')
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    reporter = ProgressReporter(pod="p", namespace="ns", min_interval=0, slurm_job="41")
    for step in range(200):
        reporter.step(step)
    assert len((tmp_path / "calls").read_text().splitlines()) == 1

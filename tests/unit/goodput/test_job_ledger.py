"""Job time accounting: the categories partition wall time, interruptions by cause, MFU."""

from __future__ import annotations

import datetime

import pytest

from pitcrew.core.job_ledger import (
    PRODUCTIVE,
    RECOVERY,
    WAITING,
    WASTED,
    Cause,
    JobLedger,
    JobObservation,
    JobPod,
    Progress,
)

T0 = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
H100_PEAK = 989.4e12


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def pods(*nodes: str, running: bool = True) -> tuple[JobPod, ...]:
    return tuple(
        JobPod(f"trainer-{i}", running, node, 8, H100_PEAK) for i, node in enumerate(nodes)
    )


def totals(ledger: JobLedger, steps: list[tuple[float, JobObservation]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for seconds, observation in steps:
        for category, value in ledger.tick(observation, at(seconds)).seconds.items():
            out[category] = out.get(category, 0.0) + value
    return out


STEP = 0.5
"""Seconds per step of the scripted job."""


def pod(
    name: str,
    node: str,
    *,
    uid: str = "",
    running: bool = True,
    started: float | None = 0.0,
    stopped: float | None = None,
    restarts: int = 0,
    gone: bool = False,
) -> JobPod:
    return JobPod(
        name,
        running,
        node,
        8,
        H100_PEAK,
        uid=uid or f"uid-{name}",
        restarts=restarts,
        started_at=at(started) if started is not None else None,
        stopped_at=at(stopped) if stopped is not None else None,
        gone=gone,
    )


def report(step: int, t: float, checkpoint: tuple[int, float] | None = (0, 0.0)) -> Progress:
    if checkpoint is None:
        return Progress(step=step, time=at(t))
    return Progress(
        step=step, time=at(t), checkpoint_step=checkpoint[0], checkpoint_time=at(checkpoint[1])
    )


def run(script: list[tuple[float, JobObservation]]) -> tuple[dict[str, float], list[Cause]]:
    ledger = JobLedger(last=T0)
    found: dict[str, float] = {}
    causes: list[Cause] = []
    for seconds, observation in script:
        tick = ledger.tick(observation, at(seconds))
        causes += tick.interruptions
        for category, value in tick.seconds.items():
            found[category] = found.get(category, 0.0) + value
    return found, causes


def test_a_sub_second_outage_between_two_ticks_is_placed_where_the_job_shows_it() -> None:
    a, b = pod("r0", "node-a", started=2), pod("r1", "node-b", started=2)
    replacement = pod("r1", "node-c", uid="uid-r1-new", started=17.8)
    evicted = pod("r1", "node-b", running=False, stopped=17.3, gone=True)
    out = frozenset({"node-b"})
    script = [
        (
            0,
            JobObservation(
                (pod("r0", "node-a", running=False), pod("r1", "node-b", running=False))
            ),
        ),
        # Pods run from 2 s; 16 steps of 0.5 s by 10 s: progress resumed at 2 s.
        (10, JobObservation((a, b), report(16, 10))),
        (15, JobObservation((a, b), report(26, 15, checkpoint=(20, 12)))),
        # Node b fails at 17.3 s; its pod is evicted and replaced (running at 17.8 s)
        # before the next tick; the job restarts from step 20 and reports at 22 s.
        (20, JobObservation((a, evicted, replacement), report(26, 15, (20, 12)), out)),
        (25, JobObservation((a, replacement), report(24, 22, (20, 12)), out)),
        (30, JobObservation((a, replacement), report(34, 27, (30, 25)))),
    ]
    found, causes = run(script)
    assert causes == [Cause.NODE_FAULT]
    lost_steps = (17.3 - 12) / STEP  # the steps since the checkpoint at the failure
    assert found == pytest.approx(
        {
            WAITING: 2.0,
            PRODUCTIVE: (12 - 2) + (25 - 20),
            WASTED: lost_steps * STEP,
            RECOVERY: 20 - 17.3,  # until progress resumed from step 20
        }
    )
    assert sum(found.values()) == pytest.approx(30 - 5)  # the rest is pending: since 25 s


def test_pods_missing_for_another_reason_count_as_waiting() -> None:
    a, b = pod("r0", "node-a"), pod("r1", "node-b")
    stopped = pod("r1", "node-b", running=False, stopped=12.0)
    found, causes = run(
        [
            (0, JobObservation((a, b))),
            (10, JobObservation((a, b))),
            (20, JobObservation((a, stopped))),
        ]
    )
    assert causes == [Cause.OTHER]
    assert found == {PRODUCTIVE: 12.0, WAITING: 8.0}


def test_a_job_that_never_checkpoints_counts_its_running_time_productive() -> None:
    a = pod("r0", "node-a")
    found, causes = run(
        [
            (0, JobObservation((a,))),
            (30, JobObservation((a,))),
            (40, JobObservation((pod("r0", "node-a", running=False, stopped=35),))),
        ]
    )
    assert causes == [Cause.OTHER]
    assert found == {PRODUCTIVE: 35.0, WAITING: 5.0}


def test_a_restart_inside_the_pods_shows_as_a_lower_step() -> None:
    a = pod("r0", "node-a")
    found, causes = run(
        [
            (0, JobObservation((a,), report(0, 0))),
            (10, JobObservation((a,), report(20, 10, (20, 10)))),
            (15, JobObservation((a,), report(30, 15, (20, 10)))),
            # torchrun restarted the workers: step 24 from checkpoint 20, by 24 s.
            (25, JobObservation((a,), report(24, 24, (20, 10)))),
        ]
    )
    assert causes == [Cause.OTHER]
    assert found[WASTED] == pytest.approx(15 - 10)  # at the latest report of the higher step
    assert found[WAITING] == pytest.approx(22 - 15)  # resumed at 24 s less 4 steps


def test_a_container_restart_is_an_interruption_at_its_finish_time() -> None:
    a = pod("r0", "node-a")
    restarted = pod("r0", "node-a", restarts=1, stopped=13, started=14)
    found, causes = run(
        [
            (0, JobObservation((a,), report(0, 0))),
            (10, JobObservation((a,), report(20, 10, (20, 10)))),
            (20, JobObservation((restarted,), report(20, 10, (20, 10)))),
            (30, JobObservation((restarted,), report(28, 26, (20, 10)))),
        ]
    )
    assert causes == [Cause.OTHER]
    assert found[WASTED] == pytest.approx(3.0)
    assert found[WAITING] == pytest.approx(22 - 13)


def test_the_categories_partition_wall_time_once_the_job_finishes() -> None:
    a = pod("r0", "node-a")
    found, _ = run(
        [
            (0, JobObservation((a,), report(0, 0))),
            (10, JobObservation((a,), report(20, 10, (20, 10)))),
            (20, JobObservation((a,), report(40, 20, (40, 20)), finished=True)),
        ]
    )
    assert sum(found.values()) == pytest.approx(20.0)


def test_a_job_first_seen_running_is_running_from_then() -> None:
    a = pod("r0", "node-a", started=-3600)
    found, causes = run(
        [
            (0, JobObservation((a,), report(5000, -1, None))),
            (10, JobObservation((a,), report(5020, 9, None))),
        ]
    )
    assert causes == []
    assert found == {PRODUCTIVE: 10.0}


def test_mfu_from_flops_per_step_and_step_rate() -> None:
    ledger = JobLedger(last=T0)
    flops = 0.5 * 16 * H100_PEAK  # half the peak of 16 GPUs per step, one step a second
    ledger.tick(
        JobObservation(pods("a", "b"), Progress(step=0, time=at(0), flops_per_step=flops)), at(1)
    )
    tick = ledger.tick(
        JobObservation(pods("a", "b"), Progress(step=30, time=at(30), flops_per_step=flops)),
        at(31),
    )
    assert tick.mfu is not None
    assert abs(tick.mfu - 0.5) < 1e-9
    assert tick.gpus == 16


def test_mfu_from_the_six_n_tokens_estimate() -> None:
    progress = Progress(step=1, time=T0, parameters=70_000_000_000, tokens_per_step=4_000_000)
    assert progress.model_flops_per_step == 6 * 70e9 * 4e6


def test_a_checkpoint_first_seen_with_the_crash_still_counts_before_it() -> None:
    a, b = pod("r0", "node-a"), pod("r1", "node-b")
    # The checkpoint at 18 s and the failure at 19 s both fall between the ticks.
    gone = pod("r1", "node-b", running=False, stopped=19, gone=True)
    found, _ = run(
        [
            (0, JobObservation((a, b), report(0, 0))),
            (10, JobObservation((a, b), report(20, 10, (20, 10)))),
            (20, JobObservation((a, gone), report(36, 18, (36, 18)), frozenset({"node-b"}))),
        ]
    )
    assert found[PRODUCTIVE] == pytest.approx(18.0)
    assert found[WASTED] == pytest.approx(1.0)
    assert found[RECOVERY] == pytest.approx(1.0)

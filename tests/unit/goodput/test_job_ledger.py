"""Job time accounting: the categories partition wall time, interruptions by cause, MFU."""

from __future__ import annotations

import datetime

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


def test_time_before_the_last_checkpoint_is_productive_and_the_rest_pending() -> None:
    ledger = JobLedger(last=T0)
    progress = Progress(step=100, time=at(60), checkpoint_step=90, checkpoint_time=at(50))
    found = totals(ledger, [(60, JobObservation(pods("a", "b"), progress))])
    assert found == {PRODUCTIVE: 50.0}
    assert ledger.pending == 10.0


def test_an_interruption_by_a_node_fault_wastes_the_pending_work_then_counts_recovery() -> None:
    ledger = JobLedger(last=T0)
    progress = Progress(step=100, time=at(60), checkpoint_step=90, checkpoint_time=at(40))
    ledger.tick(JobObservation(pods("a", "b"), progress), at(60))
    evicted = JobObservation(pods("a"), progress, out_of_service=frozenset({"b"}))
    tick = ledger.tick(evicted, at(70))
    assert tick.interruptions == [Cause.NODE_FAULT]
    assert tick.seconds == {WASTED: 20.0, RECOVERY: 10.0}
    back = totals(ledger, [(100, JobObservation(pods("a", "c"), progress))])
    assert back == {}  # running again, nothing checkpointed yet
    assert ledger.pending == 30.0


def test_pods_missing_for_another_reason_count_as_waiting() -> None:
    ledger = JobLedger(last=T0)
    ledger.tick(JobObservation(pods("a", "b")), at(10))
    tick = ledger.tick(JobObservation(pods("a")), at(30))
    assert tick.interruptions == [Cause.OTHER]
    assert tick.seconds == {WAITING: 20.0}


def test_a_job_that_never_checkpoints_counts_running_time_productive() -> None:
    ledger = JobLedger(last=T0)
    found = totals(ledger, [(30, JobObservation(pods("a"))), (90, JobObservation(pods("a")))])
    assert found == {PRODUCTIVE: 90.0}


def test_a_pod_replaced_between_two_ticks_is_still_an_interruption() -> None:
    ledger = JobLedger(last=T0)
    ledger.tick(JobObservation(pods("a", "b")), at(10))
    replaced = (pods("a")[0], JobPod("trainer-9", True, "c", 8, H100_PEAK))
    tick = ledger.tick(JobObservation(replaced, out_of_service=frozenset({"b"})), at(20))
    assert tick.interruptions == [Cause.NODE_FAULT]


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

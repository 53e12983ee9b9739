"""Job time accounting: the categories partition wall time, interruptions by cause, MFU."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    created: float | None = None,
) -> JobPod:
    return JobPod(
        name,
        running,
        node,
        8,
        H100_PEAK,
        uid=uid or f"uid-{name}",
        created_at=at(created) if created is not None else None,
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


def test_a_pod_lost_again_before_progress_resumed_is_another_interruption() -> None:
    """The job restarted (every pod ran again) and lost a pod before its first report:
    two interruptions, and the stretch between them stays recovery (no progress showed)."""
    a, b = pod("r0", "node-a", started=0), pod("r1", "node-b", started=0)
    evicted = pod("r1", "node-b", running=False, stopped=12.0, gone=True)
    again = pod("r1", "node-c", uid="uid-r1-c", started=13.0)
    lost_again = pod("r1", "node-c", uid="uid-r1-c", running=False, started=13.0, stopped=14.5)
    third = pod("r1", "node-d", uid="uid-r1-d", started=16.0)
    script = [
        (5, JobObservation((a, b), report(10, 5))),
        (10, JobObservation((a, b), report(20, 10, checkpoint=(20, 10)))),
        # Lost at 12 s, running again from 13 s, lost again at 14.5 s, up again at 16 s.
        (13.5, JobObservation((a, evicted, again), out_of_service=frozenset({"node-b"}))),
        (15, JobObservation((a, lost_again), out_of_service=frozenset({"node-b", "node-c"}))),
        (17, JobObservation((a, third))),
        (20, JobObservation((a, third), report(26, 20, checkpoint=(20, 10)))),
    ]
    found, causes = run(script)
    assert causes == [Cause.NODE_FAULT, Cause.NODE_FAULT]
    assert found == pytest.approx(
        {PRODUCTIVE: 10.0, WASTED: 2.0, RECOVERY: 17.0 - 12.0}  # resumed at 20 - 6 x 0.5
    )


def test_a_pod_that_never_ran_again_is_not_lost_again() -> None:
    """Pods that stop while the job is still down (not every pod ran since the loss)
    are the same interruption, not a new one."""
    a, b = pod("r0", "node-a", started=0), pod("r1", "node-b", started=0)
    evicted = pod("r1", "node-b", running=False, stopped=12.0, gone=True)
    a_stopped = pod("r0", "node-a", running=False, stopped=14.0)
    script = [
        (10, JobObservation((a, b), report(20, 10, checkpoint=(20, 10)))),
        (13, JobObservation((a, evicted), out_of_service=frozenset({"node-b"}))),
        (15, JobObservation((a_stopped,), out_of_service=frozenset({"node-b"}))),
    ]
    _, causes = run(script)
    assert causes == [Cause.NODE_FAULT]


def test_a_job_created_between_ticks_is_counted_from_its_first_pod() -> None:
    """The ledger of a job first seen at 10 s starts at its pods' creation (2 s), and
    a crash before that first tick, after every pod ran, is an interruption."""
    a = pod("r0", "node-a", created=2, started=3)
    b = pod("r1", "node-b", created=2, started=3, running=False, stopped=8, gone=True)
    replacement = pod("r1", "node-c", uid="uid-r1-c", created=8, started=9)
    ledger = JobLedger(last=T0)
    first = ledger.tick(
        JobObservation((a, b, replacement), report(0, 2.5), frozenset({"node-b"})), at(10)
    )
    assert first.interruptions == [Cause.NODE_FAULT]
    # Waiting until the crash (no progress showed), recovery until the replacement ran;
    # from then on pending until progress shows.
    assert first.seconds == pytest.approx({WAITING: 8 - 2, RECOVERY: 9 - 8})


def test_a_job_that_reports_checkpoints_wastes_what_it_loses_from_its_first_report() -> None:
    """Checkpoints known from the first report, taken while the job was still
    waiting: the running time lost at the first crash is wasted, not productive."""
    a, b = pod("r0", "node-a", started=1), pod("r1", "node-b", started=1)
    lost = pod("r1", "node-b", running=False, stopped=9, gone=True)
    found, causes = run(
        [
            (0.5, JobObservation((a, b), report(0, 0.5))),
            (5, JobObservation((a, b), report(8, 5))),
            (10, JobObservation((a, lost), report(8, 5), frozenset({"node-b"}))),
        ]
    )
    assert causes == [Cause.NODE_FAULT]
    assert found == pytest.approx({WAITING: 1.0, WASTED: 8.0, RECOVERY: 1.0})


def test_rank_zeros_last_report_stamped_after_its_stop_is_not_a_resumption() -> None:
    """Pod times are whole seconds: the old rank 0's last report (step 13 at 35.7 s)
    reads as later than its stop (35.5 s). Thirteen steps cannot be made in 0.2 s, so
    it is not progress after the restart, and the first real one is no second loss."""
    a, b = pod("r0", "node-a", started=0), pod("r1", "node-b", started=0)
    stopped = pod("r0", "node-a", running=False, started=0, stopped=35.5, gone=True)
    replacement = pod("r0", "node-c", uid="uid-r0-c", started=35.5)
    last_words = report(13, 35.7, checkpoint=(0, 0))
    script = [
        (30, JobObservation((a, b), report(8, 30))),
        (33, JobObservation((a, b), report(12, 33))),
        (
            37,
            JobObservation(
                (stopped, replacement, b),
                report(2, 36.7),
                frozenset({"node-a"}),
                reports=(last_words,),
            ),
        ),
    ]
    _, causes = run(script)
    assert causes == [Cause.NODE_FAULT]


def test_a_replacement_that_never_started_is_no_second_loss() -> None:
    """A replacement pod deleted before it ran, in the same second as the loss it
    replaced: one interruption."""
    a, b = pod("r0", "node-a", started=0), pod("r1", "node-b", started=0)
    stopped = pod("r1", "node-b", running=False, started=0, stopped=12.5, gone=True)
    never = pod("r1", "node-c", uid="uid-r1-c", running=False, started=None, stopped=12.5)
    again = pod("r1", "node-d", uid="uid-r1-d", started=12.5)
    script = [
        (5, JobObservation((a, b), report(10, 5))),
        (10, JobObservation((a, b), report(20, 10))),
        (14, JobObservation((a, stopped, never, again), report(2, 13.5), frozenset({"node-b"}))),
    ]
    _, causes = run(script)
    assert causes == [Cause.NODE_FAULT]


def test_a_checkpoint_first_shown_by_the_restarted_job_was_saved_work() -> None:
    """The checkpoint at step 20 (10.2 s) was overwritten by the restarted job's first
    report before a tick saw it; that report says it loaded step 20, saved at 10.2 s:
    only the 0.3 s after it were lost."""
    a, b = pod("r0", "node-a", started=0), pod("r1", "node-b", started=0)
    stopped = pod("r1", "node-b", running=False, started=0, stopped=10.5, gone=True)
    again = pod("r1", "node-c", uid="uid-r1-c", started=10.5)
    script = [
        (5, JobObservation((a, b), report(10, 5))),
        (9, JobObservation((a, b), report(18, 9))),
        (
            12,
            JobObservation(
                (a, stopped, again), report(22, 11.7, (20, 10.2)), frozenset({"node-b"})
            ),
        ),
    ]
    found, causes = run(script)
    assert causes == [Cause.NODE_FAULT]
    assert found[WASTED] == pytest.approx(10.5 - 10.2)
    assert found[PRODUCTIVE] == pytest.approx(10.2)


def test_a_checkpoint_in_the_same_second_as_the_loss_counts_before_it() -> None:
    """The pod's stop reads 10.5 s (a whole second, placed mid-second); the job's own
    report says it saved at 10.8 s, within that second: the work was saved."""
    a, b = pod("r0", "node-a", started=0), pod("r1", "node-b", started=0)
    stopped = pod("r1", "node-b", running=False, started=0, stopped=10.5, gone=True)
    again = pod("r1", "node-c", uid="uid-r1-c", started=11.5)
    script = [
        (5, JobObservation((a, b), report(10, 5))),
        (9, JobObservation((a, b), report(18, 9))),
        (
            12,
            JobObservation(
                (a, stopped, again), report(20, 10.8, (20, 10.8)), frozenset({"node-b"})
            ),
        ),
    ]
    found, causes = run(script)
    assert causes == [Cause.NODE_FAULT]
    assert found.get(WASTED, 0.0) == 0.0
    assert found[PRODUCTIVE] == pytest.approx(10.8)


def test_progress_in_the_same_second_as_a_second_loss_was_made_before_it() -> None:
    """After a first loss the job runs again from 13.5 s and reports step 22 at 17.6 s;
    its next loss reads 17.5 s (a whole second, placed mid-second), yet the report was
    before it (no progress follows a loss that soon). The restart was resumed, so the
    second loss wastes the running time since it, not recovery."""
    a, b = pod("r0", "node-a", started=0), pod("r1", "node-b", started=0)
    evicted = pod("r1", "node-b", running=False, stopped=12.0, gone=True)
    again = pod("r1", "node-c", uid="uid-r1-c", started=13.5)
    lost_again = pod("r1", "node-c", uid="uid-r1-c", running=False, started=13.5, stopped=17.5)
    script = [
        (5, JobObservation((a, b), report(10, 5))),
        (10, JobObservation((a, b), report(20, 10, checkpoint=(20, 10)))),
        (14, JobObservation((a, evicted, again), out_of_service=frozenset({"node-b"}))),
        (
            19,
            JobObservation(
                (a, lost_again),
                report(22, 17.6, checkpoint=(20, 10)),
                out_of_service=frozenset({"node-c"}),
            ),
        ),
    ]
    found, causes = run(script)
    assert causes == [Cause.NODE_FAULT, Cause.NODE_FAULT]
    resumed = 17.6 - 2 * STEP
    assert found[WASTED] == pytest.approx((12.0 - 10.0) + (17.5 - resumed))
    assert found[RECOVERY] == pytest.approx((resumed - 12.0) + (19 - 17.5))


ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["tick", "stop", "start", "move", "swap", "stop-one", "report", "gone"]),
        st.integers(min_value=0, max_value=2),
        st.integers(min_value=0, max_value=20),
    ),
    max_size=40,
)


def scripted(
    actions: list[tuple[str, int, int]],
) -> Iterator[tuple[float, tuple[JobPod, ...], Progress | None]]:
    """A job of three pods acted on by ``actions``: each tick's time, its pods (the same
    tuple while none changed, as the simulator hands them) and rank 0's last report."""
    job = [pod(f"r{i}", f"node-{i}", running=False, started=None) for i in range(3)]
    pods_now = tuple(job)
    t, step, moves = 0.0, 0, 0
    progress: Progress | None = None
    for action, rank, wait in actions:
        t += wait
        if action == "stop":
            job = [
                p._replace(running=False, restarts=p.restarts + 1, stopped_at=at(t)) for p in job
            ]
        elif action == "start":
            job = [p._replace(running=True, started_at=at(t), stopped_at=None) for p in job]
        elif action == "move":
            moves += 1
            job[rank] = pod(f"r{rank}", f"node-{3 + moves}", uid=f"u{moves}", running=False)
        elif action == "swap":  # replaced between two ticks: gone without a trace
            moves += 1
            job[rank] = pod(f"r{rank}", f"node-{3 + moves}", uid=f"u{moves}", started=t)
        elif action == "stop-one":
            job[rank] = job[rank]._replace(running=False, stopped_at=at(t))
        elif action == "gone":
            job[rank] = job[rank]._replace(gone=True)
        elif action == "report":
            step += wait
            progress = report(step, t, checkpoint=(step - step % 10, max(0.0, t - 5)))
        if tuple(job) != pods_now:
            pods_now = tuple(job)  # built again only when a pod changed
        yield t, pods_now, progress


@given(ACTIONS)
@settings(max_examples=200, deadline=None)
def test_the_very_same_pods_again_read_as_a_copy_of_them(
    actions: list[tuple[str, int, int]],
) -> None:
    """A caller that hands the ledger the same tuple of pods while none changed (the
    simulator) gets what a caller that builds them again every tick gets."""
    same, copied = JobLedger(last=T0), JobLedger(last=T0)
    out = frozenset({"node-1"})
    for t, pods_now, progress in scripted(actions):
        copy = tuple(p for p in pods_now)
        assert copy is not pods_now
        assert same.tick(JobObservation(pods_now, progress, out, size=3), at(t)) == copied.tick(
            JobObservation(copy, progress, out, size=3), at(t)
        )
    assert same.state == copied.state


class PodByPod(JobLedger):
    """The ledger reading each pod's stop as an event of its own."""

    def _events(
        self,
        observation: JobObservation,
        now: datetime.datetime,
        *,
        pods: Iterable[tuple[JobPod, str]],
    ) -> list[tuple[datetime.datetime, int, Progress | list[tuple[JobPod, str]]]]:
        split: list[tuple[datetime.datetime, int, Progress | list[tuple[JobPod, str]]]] = []
        for when, kind, event in super()._events(observation, now, pods=pods):
            if isinstance(event, Progress):
                split.append((when, kind, event))
            else:
                split.extend((when, kind, [one]) for one in event)
        return split


@given(ACTIONS, st.sampled_from(["node-0", "node-1", "node-2"]))
@settings(max_examples=300, deadline=None)
def test_the_pods_of_one_loss_read_together_as_each_read_alone(
    actions: list[tuple[str, int, int]], taken_out: str
) -> None:
    """The pods that stopped at one instant are read as one event (a restart of a job
    of thousands of pods costs one count of the pods running, not one per pod): what
    the ledger finds is what it finds reading each pod's stop alone, in order."""
    together, alone = JobLedger(last=T0), PodByPod(last=T0)
    out = frozenset({taken_out})
    for t, pods_now, progress in scripted(actions):
        observation = JobObservation(pods_now, progress, out, size=3)
        assert together.tick(observation, at(t)) == alone.tick(observation, at(t))
    assert (together.state, together.cause) == (alone.state, alone.cause)

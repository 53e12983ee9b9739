"""Stragglers in `pitcrew simulate`: the job's pace, and what leaving a slow node in costs.

A straggler crashes nothing: a synchronous job steps at its slowest rank's pace.
These tests hold the pace arithmetic to hand-computed steps (a factor of 2 halves
the steps, a change of pace in the middle of a step keeps the share done), the
accounting of the throughput lost to it, and the comparison: Pitcrew takes the
slow node out on its job's reports (reason ``Straggler``), people notice late.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from pitcrew.api.policy import GPUHealthPolicySpec
from pitcrew.simulate.clock import Clock, at
from pitcrew.simulate.compare import compare
from pitcrew.simulate.job import Job
from pitcrew.simulate.mix import Exposure, Shows, mix, schedule
from pitcrew.simulate.realism import REALISTIC
from pitcrew.simulate.run import run
from pitcrew.simulate.settings import (
    DEFAULTS,
    STOCK,
    Assumptions,
    Contender,
    Settings,
    default_spec,
    with_spares,
)
from pitcrew.simulate.timing import DAY, YEAR
from pitcrew.simulate.world import World

STEP = 6.0
SLOW_ONLY = Settings(
    nodes=80,
    job_nodes=64,
    days=20,
    seed=1,
    mix="exponential",
    node_mtbf=1e15,
    stragglers_per_node_year=4.0,
    realism=replace(REALISTIC, straggler_floor=1.2),
)
"""A 64-node job for 20 days whose only faults are stragglers (the exponential mix at a
node MTBF of 10^15 s has none in that time): about 15 of them, each slow enough for the
default policy's threshold (the realistic world's go as low as 5 %)."""


def _job(*, checkpoint_interval: float = 10 * DAY) -> tuple[Clock, Job]:
    """A two-node job training from time zero, on a world with nobody acting."""
    settings = Settings(
        nodes=4, job_nodes=2, step_time=STEP, checkpoint_interval=checkpoint_interval
    )
    clock = Clock()
    world = World(
        clock=clock,
        settings=settings,
        assumptions=Assumptions(),
        pool=4,
        job_nodes=2,
        created=at(-DAY),
        lemons=frozenset(),
        device_plugin=True,
    )
    job = world.job
    for rank in range(2):
        job.assign(rank, world.nodes[rank])
        world.nodes[rank].job = True
    job.begin()
    return clock, job


def _steps_at(clock: Clock, job: Job, times: list[float]) -> list[int]:
    seen: list[int] = []
    for t in times:
        clock.at(t, lambda: seen.append(job._step_now()))
    clock.run(max(times))
    return seen


def _without_stragglers(spec: GPUHealthPolicySpec) -> GPUHealthPolicySpec:
    stragglers = spec.stragglers.model_copy(update={"enabled": False})
    return spec.model_copy(update={"stragglers": stragglers})


# -- the pace -------------------------------------------------------------------------------


def test_a_straggler_twice_as_slow_halves_the_steps() -> None:
    clock, job = _job()
    clock.at(600.0, job.set_pace, 2.0)
    assert _steps_at(clock, job, [600.0, 1200.0]) == [100, 150]


def test_a_change_of_pace_inside_a_step_keeps_the_share_done() -> None:
    clock, job = _job()
    # Half of step 101 is done at 603 s; the other half takes 6 s at half speed.
    clock.at(603.0, job.set_pace, 2.0)
    clock.at(700.5, job.set_pace, 1.0)
    reports: list[tuple[int, float]] = []

    def report() -> None:
        progress = job._progress()
        assert progress is not None
        reports.append((progress.step, (progress.time - at(0.0)).total_seconds()))

    for t in (604.0, 608.9, 609.0, 620.0, 1000.0):
        clock.at(t, report)
    clock.run(1000.0)
    # 100.5 steps by 603 s, 97.5 s at 12 s a step (8.125), then 6 s a step again.
    work = 100.5 + 97.5 / 12 + (1000.0 - 700.5) / 6
    assert reports == [
        (100, 600.0),  # the report names the last step done, and when it was done
        (100, 600.0),
        (101, 609.0),
        (101, 609.0),
        (math.floor(work), pytest.approx(700.5 + (158 - 108.625) * 6)),
    ]


def test_steps_under_changing_pace_are_monotone_and_exact() -> None:
    clock, job = _job()
    rng = random.Random(7)  # noqa: S311 - a reproducible test
    changes = sorted(rng.uniform(0, 5000) for _ in range(40))
    paces = [rng.choice((1.0, 1.2, 1.7, 2.0)) for _ in changes]
    for t, pace in zip(changes, paces, strict=True):
        clock.at(t, job.set_pace, pace)
    samples = sorted(rng.uniform(0, 5000) for _ in range(300))
    seen = _steps_at(clock, job, samples)
    assert seen == sorted(seen)

    def work(t: float) -> float:
        """Steps done by ``t``, integrated by hand: dt / (step time x pace)."""
        done, last, pace = 0.0, 0.0, 1.0
        for change, new in zip(changes, paces, strict=True):
            if change >= t:
                break
            done += (change - last) / (STEP * pace)
            last, pace = change, new
        return done + (t - last) / (STEP * pace)

    assert seen == [math.floor(work(t) + 1e-6) for t in samples]


def test_a_slow_job_checkpoints_every_so_many_steps_not_every_so_many_seconds() -> None:
    clock, job = _job(checkpoint_interval=60.0)  # a checkpoint every 10 steps
    clock.at(30.0, job.set_pace, 2.0)  # 5 steps done; 5 more at 12 s a step
    clock.run(151.0)
    # Step 10 at 90 s, a blocking checkpoint of a minute, durable at 150 s.
    assert (job.checkpoint_step, job.checkpoint_stamp) == (10, 150.0)
    assert _steps_at(clock, job, [161.9, 162.0]) == [10, 11]


def test_the_pace_costs_the_training_kept_and_not_what_a_crash_threw_away() -> None:
    clock, job = _job()
    clock.at(600.0, job.set_pace, 2.0)
    clock.at(1200.0, job.set_pace, 1.0)
    clock.run(1800.0)
    job.finish()
    # 600 s at half speed: 300 s of it made nothing a healthy job would not have.
    assert job.totals.straggling == pytest.approx(600.0)
    assert job.totals.slowed == pytest.approx(300.0)

    clock, job = _job()
    clock.at(0.0, job.set_pace, 1.5)
    clock.at(900.0, job.crash)  # before any checkpoint: all of it is wasted progress
    clock.run(1000.0)
    job.finish()
    assert job.totals.straggling == pytest.approx(900.0)
    assert job.totals.slowed == 0.0


# -- the faults -----------------------------------------------------------------------------


def test_stragglers_come_on_their_own_streams_and_leave_the_mix_as_it_was() -> None:
    exposure = Exposure(
        nodes=64,
        job_nodes=60,
        gpus_per_node=8,
        seconds=30 * DAY,
        warning_share=0.1,
        warning_lead=3600.0,
    )
    plain = schedule(mix("llama3-405b"), exposure, seed=4)
    slow_exposure = Exposure(**{**exposure.__dict__, "stragglers": 3.0 / YEAR})
    both = schedule(mix("llama3-405b"), slow_exposure, seed=4)
    stragglers = [f for f in both if f.kind.shows is Shows.SLOW]
    others = [f for f in both if f.kind.shows is not Shows.SLOW]
    assert len(stragglers) > 5
    assert [(f.onset, f.node, f.kind.name) for f in others] == [
        (f.onset, f.node, f.kind.name) for f in plain
    ]
    assert all(1.2 <= f.slowdown <= 2.0 for f in stragglers)
    assert all(f.slowdown == 1.0 for f in others)
    assert len({round(f.slowdown, 6) for f in stragglers}) == len(stragglers)


# -- the comparison -------------------------------------------------------------------------


def test_pitcrew_takes_a_straggler_out_and_loses_far_less_to_it_than_the_baseline() -> None:
    spec = with_spares(default_spec(), 2)
    comparison = compare(
        SLOW_ONLY,
        [
            Contender(STOCK, None),
            Contender(DEFAULTS, spec),
            Contender("stragglers-off", _without_stragglers(spec)),
        ],
        attribution=False,
    )
    baseline = comparison.outcomes[STOCK]
    pitcrew = comparison.outcomes[DEFAULTS]
    off = comparison.outcomes["stragglers-off"]
    assert baseline.stragglers.faults >= 10
    # Masking (a straggler on a node already slow) depends on the policy: a few apart.
    assert pitcrew.stragglers.faults == pytest.approx(baseline.stragglers.faults, abs=2)
    # People notice a slow job in hours; the job's reports name the node in 90 s and
    # Pitcrew drains it at the next checkpoint.
    assert baseline.stragglers.throughput_lost > 0.05
    assert pitcrew.stragglers.throughput_lost < baseline.stragglers.throughput_lost / 5
    assert pitcrew.stragglers.hours < baseline.stragglers.hours / 5
    assert pitcrew.effective_goodput > baseline.effective_goodput + 0.05
    # The real lifecycle took them out as Suspect, reason Straggler (Healthy -> Suspect
    # and Suspect -> Draining each record one): those on the job's nodes (four nodes in
    # five; one outside slows nothing until the job lands on it). The probe after a
    # repair that did not clear one found it (a gemm finding fails the validation).
    taken_out = pitcrew.records.get("Straggler", 0) // 2
    assert 0.7 * pitcrew.stragglers.faults <= taken_out <= pitcrew.stragglers.faults
    assert pitcrew.records.get("Gemm", 0) > 0
    assert baseline.repairs_by_hand > 0
    assert pitcrew.repairs_by_hand == 0
    # With stragglers.enabled false, nobody but people notices: as slow as the baseline.
    assert off.records.get("Straggler", 0) == 0
    assert off.stragglers.throughput_lost > 5 * pitcrew.stragglers.throughput_lost


def test_a_straggler_slower_than_the_median_by_less_than_the_threshold_is_left_to_people() -> None:
    spec = with_spares(default_spec(), 2)
    strict = spec.model_copy(
        update={
            "stragglers": spec.stragglers.model_copy(update={"slower_than_median_percent": 300})
        }
    )
    outcome = run(SLOW_ONLY, Contender("strict", strict))
    assert outcome.records.get("Straggler", 0) == 0
    assert outcome.repairs_by_hand > 0


def test_a_run_with_stragglers_repeats_exactly_and_reports_them() -> None:
    contenders = [Contender(STOCK, None), Contender(DEFAULTS, with_spares(default_spec(), 2))]
    short = SLOW_ONLY.with_(days=8)
    first = compare(short, contenders, attribution=False).json()
    again = compare(short, contenders, attribution=False).json()
    assert first == again
    policies = first["policies"]
    assert isinstance(policies, dict)
    for policy in policies.values():
        assert set(policy["stragglers"]) == {"faults", "hours", "throughputLost", "mfuLost"}
        assert policy["effectiveGoodput"] == pytest.approx(
            policy["jobGoodput"] - policy["stragglers"]["throughputLost"], abs=2e-6
        )
    assert policies[STOCK]["stragglers"]["faults"] > 0
    other = compare(short.with_(seed=2), contenders, attribution=False).json()
    assert other["policies"] != policies
    settings = first["settings"]
    assert isinstance(settings, dict)
    assert settings["stragglersPerNodeYear"] == 4.0


def test_no_stragglers_no_pace_cost() -> None:
    outcome = run(
        Settings(nodes=66, days=4, seed=3, stragglers_per_node_year=0.0),
        Contender(DEFAULTS, with_spares(default_spec(), 1)),
    )
    assert outcome.stragglers.faults == 0
    assert outcome.stragglers.hours == 0.0
    assert outcome.effective_goodput == outcome.job_goodput

"""The realistic world of `pitcrew simulate`, and the kind world it leaves as it was.

Each of the realistic world's unkindnesses is held to a hand-computed case on a
small world built here (a hang that lasts until the NCCL watchdog, pods that take
the devcluster's time to start at the job's size, a restart that fails, a stall per
asynchronous snapshot, a rack's fault on all its nodes at once, silent corruption
found late and rolled back past the last checkpoint, a spare other work had
borrowed, a rank moved to a node that must pull the job's images, a fault on an
idle node), and the kind world to the figures it printed
before the realistic world existed.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from pitcrew.api.vocabulary import RESERVED_TAINT
from pitcrew.core.views import Taint
from pitcrew.simulate.clock import Clock, at
from pitcrew.simulate.command import add_arguments, settings_from
from pitcrew.simulate.job import State
from pitcrew.simulate.mix import LLAMA3, Depth, Exposure, Fault, FaultKind, Mix, schedule
from pitcrew.simulate.people import People
from pitcrew.simulate.realism import KIND, REALISTIC, Realism, WorldKind, pod_start
from pitcrew.simulate.run import run
from pitcrew.simulate.settings import STOCK, Assumptions, Contender, Settings, baselines
from pitcrew.simulate.timing import DAY, HOUR, MINUTE
from pitcrew.simulate.world import JOB_RESERVATION, World

FAULTY_GPU = next(k for k in LLAMA3 if k.name == "faulty GPU")
POWER_SUPPLY = next(k for k in LLAMA3 if k.name == "power supply")
NETWORK = next(k for k in LLAMA3 if k.name == "network switch/cable")
SDC = next(k for k in LLAMA3 if k.name == "silent data corruption")
QUIET = replace(KIND, pod_start=0.0)
"""The kind world: each test switches on the one unkindness it is about."""


def _world(realism: Realism, *, pool: int = 4, job_nodes: int = 2, **settings: object) -> World:
    """A job training from time zero on the first ``job_nodes`` of ``pool`` nodes, nobody
    acting on faults (no people, no Pitcrew): the device plugin and the watchdog only."""
    chosen = Settings(nodes=pool, job_nodes=job_nodes, realism=realism).with_(**settings)
    world = World(
        clock=Clock(),
        settings=chosen,
        assumptions=Assumptions(),
        pool=pool,
        job_nodes=job_nodes,
        created=at(-DAY),
        lemons=frozenset(),
        device_plugin=True,
    )
    for rank in range(job_nodes):
        world.job.assign(rank, world.nodes[rank])
        world.nodes[rank].job = True
    world.job.begin()
    return world


def _fault(kind: FaultKind, node: int, when: float, **fields: object) -> Fault:
    fault = Fault(
        id=0,
        kind=kind,
        node=node,
        onset=when,
        crash=when,
        warned=False,
        depth=Depth.REBOOT,
        gpu=0,
        rng=random.Random(1),  # noqa: S311
    )
    return replace(fault, **fields)


def _states(world: World, times: list[float]) -> list[State]:
    seen: list[State] = []
    for t in times:
        world.clock.at(t, lambda: seen.append(world.job.state))
    world.clock.run(max(times))
    return seen


# -- hangs ----------------------------------------------------------------------------------


def test_a_hung_job_runs_on_until_the_nccl_watchdog_ends_it() -> None:
    world = _world(QUIET)
    world.clock.at(100.0, world.onset, _fault(FAULTY_GPU, 0, 100.0, hangs=True))
    before, hung, after = _states(world, [99.0, 699.0, 701.0])
    assert (before, hung) == (State.RUNNING, State.HUNG)
    assert after is not State.HUNG  # the watchdog crashed it at 700 s
    assert world.job.totals.hangs == 1
    assert world.job.totals.crashes == 1


def test_a_hang_keeps_the_pods_running_and_says_since_when() -> None:
    world = _world(QUIET)
    world.clock.at(100.0, world.onset, _fault(FAULTY_GPU, 0, 100.0, hangs=True))
    world.clock.run(400.0)
    assert world.job.hung_since == 100.0
    assert world.job.pods_up
    assert all(p.running for p in world.job.pods)


def test_the_same_fault_without_a_hang_crashes_the_job_at_once() -> None:
    world = _world(QUIET)
    world.clock.at(100.0, world.onset, _fault(FAULTY_GPU, 0, 100.0))
    world.clock.run(101.0)
    assert world.job.state is State.DOWN
    assert world.job.totals.hangs == 0


def test_a_share_of_gpu_network_and_software_faults_hang_and_no_other() -> None:
    exposure = Exposure(
        nodes=64,
        job_nodes=64,
        gpus_per_node=8,
        seconds=200 * DAY,
        warning_share=0.0,
        warning_lead=HOUR,
        realism=replace(QUIET, hang_share=0.5),
    )
    rates = tuple(1.0 / (30 * DAY) for _ in LLAMA3)
    faults = schedule(Mix("test", LLAMA3, rates, 0.0), exposure, seed=1)
    may = [f for f in faults if f.kind.shows in ("gpu", "job")]
    others = [f for f in faults if f.kind.shows not in ("gpu", "job")]
    assert len(may) > 500
    assert sum(f.hangs for f in may) / len(may) == pytest.approx(0.5, abs=0.05)
    assert not any(f.hangs for f in others)


# -- pods and restarts ----------------------------------------------------------------------


def test_pods_start_in_the_devclusters_time_at_the_jobs_size() -> None:
    # 31 s for a pod (the median of 1,500 recreated on devcluster), and 50 s more for
    # 1,500 pods: the last ran at 81 s.
    assert pod_start(REALISTIC, 1500) == pytest.approx(81.0)
    assert pod_start(REALISTIC, 2048) == pytest.approx(31.0 + 2048 * 50 / 1500)
    assert pod_start(replace(REALISTIC, pod_start=12.0), 2048) == 12.0
    assert pod_start(KIND, 2048) == 0.0


def test_a_restart_waits_for_the_pods_to_start_then_pays_the_restart_cost() -> None:
    world = _world(replace(QUIET, pod_start=100.0), restart_cost=600.0)
    world.clock.at(1000.0, world.job.crash)
    # Terminated at 1,030 s, pods created, all running at 1,130 s, training at 1,730 s.
    states = _states(world, [1029.0, 1129.0, 1131.0, 1729.0, 1731.0])
    assert states == [State.DOWN, State.STARTING, State.STARTING, State.STARTING, State.RUNNING]


def test_a_failed_restart_crashes_again_and_the_job_never_runs() -> None:
    world = _world(replace(QUIET, restart_failure=1.0), restart_cost=600.0)
    world.clock.at(1000.0, world.job.crash)
    world.clock.run(1000.0 + 5 * HOUR)
    assert world.job.state is not State.RUNNING
    # Every 630 s (30 s termination, 600 s restart) another restart failed.
    assert world.job.pods[0].restarts == 1 + int(5 * HOUR // 630)


def test_restart_times_spread_around_the_restart_cost() -> None:
    world = _world(replace(QUIET, restart_spread=2.0))
    draws = [world.job.restarts.next()[0] for _ in range(2000)]
    draws.sort()
    assert draws[1000] == pytest.approx(600.0, rel=0.1)  # the median
    assert draws[1800] == pytest.approx(1200.0, rel=0.1)  # the 90th percentile


# -- checkpoints ----------------------------------------------------------------------------


def test_an_asynchronous_snapshot_stalls_training_for_its_seconds() -> None:
    world = _world(
        replace(QUIET, snapshot_stall=5.0),
        async_checkpoint=True,
        checkpoint_interval=10 * MINUTE,
        step_time=1.0,
    )
    world.clock.run(HOUR + 30.0)
    # Six checkpoints in the first hour (every 600 steps, each 5 s more): 30 s of stall.
    assert world.job.totals.checkpointing == 30.0
    assert world.job.checkpoint_step == 3000  # the fifth (durable a minute after it)


def test_silent_corruption_found_late_rolls_back_past_the_last_checkpoint() -> None:
    world = _world(
        replace(QUIET, sdc_detection=HOUR),
        async_checkpoint=True,
        checkpoint_interval=10 * MINUTE,
        step_time=1.0,
    )
    sdc = _fault(SDC, 0, 35 * MINUTE, depth=Depth.HARDWARE)  # late_z 0: found at the median
    world.clock.at(sdc.onset, world.onset, sdc)
    world.clock.run(35 * MINUTE + HOUR - 1.0)
    assert world.job.state is State.RUNNING  # nothing shows yet
    assert world.job.checkpoint_step == 5400  # a checkpoint at 90 minutes, corrupt
    world.clock.run(35 * MINUTE + HOUR + 1.0)
    # Found at 95 minutes: back to the checkpoint of 30 minutes (step 1,800), the last
    # from before the corruption; the 60 minutes of training between were credited.
    assert world.job.checkpoint_step == 1800
    assert world.job.totals.rolled_back == pytest.approx(60 * MINUTE, abs=1.0)
    assert world.job.state is State.DOWN


def test_silent_corruption_in_the_kind_world_crashes_the_job_at_once() -> None:
    world = _world(QUIET, async_checkpoint=True, checkpoint_interval=10 * MINUTE)
    sdc = _fault(SDC, 0, 35 * MINUTE, depth=Depth.HARDWARE)
    world.clock.at(sdc.onset, world.onset, sdc)
    world.clock.run(35 * MINUTE + 1.0)
    assert world.job.state is State.DOWN
    assert world.job.totals.rolled_back == 0.0


# -- several nodes at once ------------------------------------------------------------------


def _group_faults(kind: FaultKind, realism: Realism, nodes: int) -> list[Fault]:
    exposure = Exposure(
        nodes=nodes,
        job_nodes=nodes,
        gpus_per_node=8,
        seconds=400 * DAY,
        warning_share=0.0,
        warning_lead=HOUR,
        realism=realism,
    )
    return schedule(Mix("test", (kind,), (1.0 / (100 * DAY),), 0.0), exposure, seed=2)


def test_a_racks_power_fault_takes_every_node_of_the_rack_at_one_instant() -> None:
    faults = _group_faults(POWER_SUPPLY, replace(QUIET, rack_share=1.0, rack_nodes=4), 10)
    by_onset: dict[float, list[int]] = {}
    for fault in faults:
        assert fault.node is not None
        by_onset.setdefault(fault.onset, []).append(fault.node)
        assert fault.depth is Depth.HARDWARE
    assert by_onset
    for nodes in by_onset.values():
        first = min(nodes)
        rack = list(range(first, min(first + 4, 10)))
        assert sorted(nodes) == rack
        assert first % 4 == 0


def test_a_leaf_switch_fault_takes_its_32_nodes_and_a_share_of_network_faults_are_one() -> None:
    faults = _group_faults(NETWORK, replace(QUIET, leaf_share=0.25), 64)
    sizes = {}
    for fault in faults:
        sizes[fault.onset] = sizes.get(fault.onset, 0) + 1
    assert set(sizes.values()) == {1, 32}
    leaves = sum(1 for n in sizes.values() if n == 32)
    assert leaves / len(sizes) == pytest.approx(0.25, abs=0.08)


def test_the_kind_world_draws_no_group_and_no_hang() -> None:
    kind = _group_faults(POWER_SUPPLY, QUIET, 10)
    assert all(not f.group and not f.hangs for f in kind)
    realistic = _group_faults(POWER_SUPPLY, replace(QUIET, rack_share=1.0), 10)
    # The realistic world's draws come from streams of their own: the faults of the
    # kind world are all there, at the same times, on the same nodes.
    assert {(f.onset, f.node) for f in kind} <= {(f.onset, f.node) for f in realistic}


# -- running hours and contended spares -----------------------------------------------------


def test_a_fault_on_a_node_that_runs_nothing_is_dropped_at_an_idle_share_of_zero() -> None:
    idle = _world(replace(QUIET, idle_fault_share=0.0))
    idle.onset(_fault(FAULTY_GPU, 3, 0.0, idle=0.5))
    assert idle.nodes[3].fault is None
    assert idle.idle_masked == 1
    busy = _world(replace(QUIET, idle_fault_share=0.0))
    busy.onset(_fault(FAULTY_GPU, 0, 0.0, idle=0.5))
    assert busy.nodes[0].fault is not None  # the job runs there
    kind = _world(QUIET)
    kind.onset(_fault(FAULTY_GPU, 3, 0.0, idle=0.5))
    assert kind.nodes[3].fault is not None


def _reserved_spare_lands(contention: float) -> float:
    """When the job's pod lands on a spare reserved for it, after node 0 is cordoned and
    the job crashes at 1,000 s (a three-node pool: the job's two and the spare)."""
    world = _world(replace(QUIET, spare_contention=contention), pool=3)
    spare = world.nodes[2]
    landed: list[float] = []

    def reserve_and_crash() -> None:
        spare.view = replace(spare.view, taints=(Taint(key=RESERVED_TAINT, value=JOB_RESERVATION),))
        world.nodes[0].view = replace(world.nodes[0].view, unschedulable=True)
        world.refresh(world.nodes[0])  # as after any change to a node
        world.refresh(spare)
        world.job.crash()

    def watch() -> None:
        if spare.job and not landed:
            landed.append(world.clock.now)
        world.clock.after(1.0, watch)

    world.clock.at(1000.0, reserve_and_crash)
    world.clock.at(1000.0, watch)
    world.clock.run(1000.0 + HOUR)
    return landed[0] - 1000.0


def test_a_spare_other_work_borrowed_takes_the_job_only_after_the_reclaim() -> None:
    assert _reserved_spare_lands(0.0) == pytest.approx(30.0, abs=1.0)  # at the relaunch
    assert _reserved_spare_lands(1.0) == pytest.approx(300.0, abs=1.0)  # the reclaim


def _pods_run_after_a_move(images_at: float | None) -> float:
    """Seconds from the crash at 1,000 s until every pod of the job runs again, rank 0
    moved to a spare reserved for the job whose images are there at ``images_at``
    (None: never pulled there); pods start at once, images take 180 s to pull."""
    world = _world(replace(QUIET, image_pull=180.0), pool=3)
    spare = world.nodes[2]
    spare.images_at = images_at
    running: list[float] = []

    def reserve_and_crash() -> None:
        spare.view = replace(spare.view, taints=(Taint(key=RESERVED_TAINT, value=JOB_RESERVATION),))
        world.nodes[0].view = replace(world.nodes[0].view, unschedulable=True)
        world.refresh(world.nodes[0])
        world.refresh(spare)
        world.job.crash()

    def watch() -> None:
        if world.job.pods_up and world.clock.now > 1000.0 and not running:
            running.append(world.clock.now)
        world.clock.after(1.0, watch)

    world.clock.at(1000.0, reserve_and_crash)
    world.clock.at(1000.0, watch)
    world.clock.run(1000.0 + HOUR)
    assert spare.job
    return running[0] - 1000.0


def test_a_rank_moved_to_a_node_without_the_jobs_images_waits_for_their_pull() -> None:
    # The pods are recreated at 1,030 s (after the old ones terminated).
    assert _pods_run_after_a_move(None) == pytest.approx(30.0 + 180.0, abs=1.0)
    assert _pods_run_after_a_move(0.0) == pytest.approx(30.0, abs=1.0)  # pre-pulled
    assert _pods_run_after_a_move(1100.0) == pytest.approx(100.0, abs=1.0)  # pull under way


def test_a_reimage_empties_the_nodes_images_and_a_reboot_keeps_them() -> None:
    world = _world(QUIET)
    people = People(world, world.settings, everything=True)
    node = world.nodes[0]
    assert node.images_at is not None  # the job ran there
    for depth, kept in ((Depth.REBOOT, True), (Depth.REIMAGE, False)):
        fault = _fault(FAULTY_GPU, 0, 0.0, depth=depth)
        node.fault = fault
        people._repaired(node, fault)
        assert (node.images_at is not None) is kept


def test_a_rank_that_stays_on_its_node_pulls_nothing() -> None:
    world = _world(replace(QUIET, image_pull=180.0, pod_start=100.0), restart_cost=600.0)
    world.clock.at(1000.0, world.job.crash)
    # As without images to pull: all running at 1,130 s, training at 1,730 s.
    assert _states(world, [1129.0, 1731.0]) == [State.STARTING, State.RUNNING]


# -- the two worlds -------------------------------------------------------------------------


def test_the_kind_world_prints_the_figures_of_the_simulator_before_the_realistic_world() -> None:
    # Measured at commit b617594 (before the realistic world) with
    # pitcrew simulate --nodes 264 --days 12 --seed 2 --async-checkpoint
    # --checkpoint-interval 10m --baseline --json
    settings = Settings(
        nodes=264,
        days=12,
        seed=2,
        async_checkpoint=True,
        checkpoint_interval=10 * MINUTE,
        realism=KIND,
    )
    people, stock = (run(settings, c) for c in baselines())
    assert round(people.job_goodput, 6) == 0.963792
    assert round(stock.job_goodput, 6) == 0.983171
    assert (people.interruptions, stock.interruptions) == (13, 14)


def test_the_realistic_world_is_the_default_and_costs_the_stock_cluster_goodput() -> None:
    assert Settings().realism == REALISTIC
    assert Settings().world is WorldKind.REALISTIC
    settings = Settings(nodes=264, days=12, seed=2)
    kind = run(settings.with_(realism=KIND), Contender(STOCK, None))
    realistic = run(settings, Contender(STOCK, None))
    assert realistic.job_goodput < kind.job_goodput
    assert realistic.hangs > 0


def test_the_command_line_picks_a_world_and_sets_its_numbers() -> None:
    import argparse  # noqa: PLC0415

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert settings_from(parser.parse_args([])).realism == REALISTIC
    assert settings_from(parser.parse_args(["--world", "kind"])).realism == KIND
    chosen = settings_from(
        parser.parse_args(["--hang-share", "0.4", "--pod-start", "2m", "--sdc-detection", "0s"])
    ).realism
    assert chosen == replace(REALISTIC, hang_share=0.4, pod_start=120.0, sdc_detection=0.0)

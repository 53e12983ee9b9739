"""Pitcrew's simulated operator judges a hung job with the operator's own rule
(``pitcrew.core.hangs.judge``): the job is restarted at the stall bound, not at the
NCCL watchdog. A hang no node shows (Llama 3's "NCCL watchdog timeouts") is blamed
on nobody: no node is taken out."""

from __future__ import annotations

import random
from dataclasses import replace

from pitcrew.api.gpunode import Phase
from pitcrew.api.policy import GPUHealthPolicySpec
from pitcrew.simulate.clock import Clock, at
from pitcrew.simulate.control import Operator
from pitcrew.simulate.job import State
from pitcrew.simulate.mix import LLAMA3, Depth, Fault, Shows
from pitcrew.simulate.realism import KIND
from pitcrew.simulate.settings import Assumptions, Contender, Settings
from pitcrew.simulate.timing import DAY
from pitcrew.simulate.world import World

WATCHDOG_HANG = next(k for k in LLAMA3 if k.shows is Shows.HANG)
SPEC = GPUHealthPolicySpec.model_validate({"nodeSelector": {}})
HUNG_AT = 1000.0


def pitcrew_world(*, detection: bool = True) -> World:
    """Two nodes of a four-node pool run the job; Pitcrew's defaults in the loop."""
    settings = Settings(nodes=4, job_nodes=2, realism=replace(KIND, pod_start=0.0))
    world = World(
        clock=Clock(),
        settings=settings,
        assumptions=Assumptions(),
        pool=4,
        job_nodes=2,
        created=at(-DAY),
        lemons=frozenset(),
        device_plugin=True,
    )
    contender = Contender("defaults", SPEC, detection=detection)
    operator = Operator(
        world, contender=contender, spec=SPEC, assumptions=Assumptions(), created=at(-DAY)
    )
    world.operator = operator
    for rank in range(2):
        world.job.assign(rank, world.nodes[rank])
        world.nodes[rank].job = True
    world.job.begin()
    operator.start(world.nodes, decide_now=world.nodes[2:])
    return world


def hang() -> Fault:
    """A hang of the job no node shows."""
    return Fault(
        id=0,
        kind=WATCHDOG_HANG,
        node=None,
        onset=HUNG_AT,
        crash=HUNG_AT,
        warned=False,
        depth=Depth.REBOOT,
        gpu=0,
        rng=random.Random(1),  # noqa: S311 - a reproducible simulation
    )


def states(world: World, times: list[float]) -> list[State]:
    seen: list[State] = []
    for t in times:
        world.clock.at(t, lambda: seen.append(world.job.state))
    world.clock.run(max(times))
    return seen


def test_the_hung_job_is_restarted_at_the_stall_bound_and_no_node_is_blamed() -> None:
    world = pitcrew_world()
    world.clock.at(HUNG_AT, world.onset, hang())
    bound = SPEC.hangs.min_stall.total_seconds()  # 10 step times of 6 s: the floor
    hung, restarted = states(world, [HUNG_AT + bound - 1, HUNG_AT + bound + 1])
    assert hung is State.HUNG
    assert restarted is not State.HUNG  # restarted, 9 minutes before the watchdog
    assert world.job.totals.hangs == 1
    operator = world.operator
    assert isinstance(operator, Operator)
    assert dict(operator.hangs) == {"Unlocalised": 1}
    world.clock.run(HUNG_AT + bound + 60)
    assert all(node.status.phase is Phase.HEALTHY for node in world.nodes[:2])
    assert not any(node.hang for node in world.nodes)


def test_without_pitcrews_detection_the_hung_job_waits_for_the_watchdog() -> None:
    world = pitcrew_world(detection=False)
    world.clock.at(HUNG_AT, world.onset, hang())
    watchdog = Assumptions().watchdog
    hung, ended = states(world, [HUNG_AT + watchdog - 1, HUNG_AT + watchdog + 1])
    assert hung is State.HUNG
    assert ended is not State.HUNG

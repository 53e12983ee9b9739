"""One simulated run: a fleet, its training job and one contender, in simulated time.

The run puts the pieces together and lets the clock go: the fault schedule
(:mod:`.mix`), the cluster and its job (:mod:`.world`, :mod:`.job`), the people
(:mod:`.people`) and, unless the contender runs without Pitcrew (``people``, ``stock``), Pitcrew
(:mod:`.control`: ``lifecycle.decide`` makes every node decision). Every contender
meets the same faults on the same nodes at the same times (each node's faults
come from its own seeded stream), so two runs differ only by what the policy did.

Accounting is the product's own: the job's time is
:class:`pitcrew.core.job_ledger.JobLedger`'s (fed by :mod:`.job`), the fleet's
GPU time by phase is :class:`pitcrew.core.fleet_ledger.FleetLedger`'s, fed every
simulated hour with the nodes whose phase changed (their transitions split the
hour) and one entry per phase for the nodes that stayed put.

The ledger counts time, and a job slowed by a straggler is as busy as a healthy
one: what the straggler's pace cost is counted beside it (:class:`Stragglers`),
as the throughput lost over the job's training time (its MFU, relative to the
job's healthy MFU) and over its wall time (points of goodput).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from pitcrew.api.gpunode import Phase
from pitcrew.api.vocabulary import IN_SERVICE
from pitcrew.core.fleet_ledger import FleetLedger, NodeTime
from pitcrew.core.job_ledger import PRODUCTIVE, RECOVERY, WAITING, WASTED
from pitcrew.simulate.clock import Clock, at
from pitcrew.simulate.control import Operator
from pitcrew.simulate.mix import Exposure, lemon_nodes, mix, schedule
from pitcrew.simulate.people import People
from pitcrew.simulate.settings import Assumptions, Contender, Settings
from pitcrew.simulate.timing import DAY, HOUR, YEAR
from pitcrew.simulate.world import World

POOL = "simulated"
BADPUT = ("wastedProgress", "recovery", "waitingForCapacity", "checkpointing")
"""The shares of job wall time that are not goodput; with it they add up to 1."""
YOUNG = 100_000
"""Allocations between two collections of the youngest objects while a run's clock runs
(CPython's default is 700)."""


@dataclass(frozen=True)
class Stragglers:
    """What stragglers cost one contender's job."""

    faults: int = 0
    """Straggler faults that struck a node (on the job's nodes or not)."""
    hours: float = 0.0
    """Hours the job trained at a straggler's pace."""
    throughput_lost: float = 0.0
    """Share of the job's wall time that trained at a straggler's pace and made no
    progress a healthy job would not have made in less: points of goodput lost to
    the pace, beside the badput (which counts time, not pace)."""
    mfu_lost: float = 0.0
    """The same over the job's training time: how much lower its MFU was over the
    run than the job's healthy MFU (0.02: 2 % of it)."""

    def json(self) -> dict[str, object]:
        return {
            "faults": self.faults,
            "hours": round(self.hours, 3),
            "throughputLost": round(self.throughput_lost, 6),
            "mfuLost": round(self.mfu_lost, 6),
        }


@dataclass(frozen=True)
class Outcome:
    """What one contender's run measured."""

    name: str
    hours: float
    job_nodes: int
    spares: int
    job_goodput: float
    """Effective training time over wall time: productive time less blocking checkpoints."""
    fleet_goodput: float
    """In-service GPU time (Healthy, Spare) over all GPU time of the pool."""
    badput: dict[str, float]
    """Shares of job wall time, by :data:`BADPUT` category."""
    interruptions: int
    """Times the job stopped: crashes, hangs, evictions and planned stops."""
    hangs: int
    """Times the job hung (progress stopped while its pods ran) before it stopped."""
    crashes: int
    """Interruptions that threw progress away (all but planned stops)."""
    node_fault_interruptions: int
    """Interruptions the job ledger put on a node Pitcrew took out of service."""
    faults: int
    """Node faults that struck (not masked by one the node already had), stragglers
    included."""
    daily: tuple[tuple[float, float], ...]
    """(day, job goodput of that day) for the plot of goodput over time."""
    fleet_seconds: dict[str, float]
    """GPU-seconds by phase."""
    decisions: int = 0
    decide_cpu_seconds: float = 0.0
    events: int = 0
    """Events the simulated clock ran: the speed benchmark's floor runs as many."""
    records: dict[str, int] = field(default_factory=dict)
    """Counts of the Events the operator recorded, by reason."""
    breaker_trips: int = 0
    repairs_by_hand: int = 0
    rmas: int = 0
    stragglers: Stragglers = field(default_factory=Stragglers)

    @property
    def effective_goodput(self) -> float:
        """Job goodput at the job's full pace: training time less what stragglers'
        pace cost of it, over wall time."""
        return self.job_goodput - self.stragglers.throughput_lost

    def json(self) -> dict[str, object]:
        """The CLI contract's object for this policy (``pitcrew simulate --json``)."""
        return {
            "jobGoodput": round(self.job_goodput, 6),
            "fleetGoodput": round(self.fleet_goodput, 6),
            "badput": {k: round(v, 6) for k, v in self.badput.items()},
            "interruptions": self.interruptions,
            "hangs": self.hangs,
            "crashes": self.crashes,
            "faults": self.faults,
            "jobNodes": self.job_nodes,
            "spares": self.spares,
            "stragglers": self.stragglers.json(),
            "effectiveGoodput": round(self.effective_goodput, 6),
        }


def run(
    settings: Settings, contender: Contender, assumptions: Assumptions | None = None
) -> Outcome:
    assumptions = assumptions or Assumptions()
    spec = contender.spec
    spares = 0 if spec is None else spec.spares.count
    job_nodes = settings.job_size
    if job_nodes + spares > settings.nodes:
        raise ValueError(
            f"{contender.name}: the job's {job_nodes} nodes and {spares} spares do not fit in "
            f"a pool of {settings.nodes} nodes; raise --nodes or lower --job-nodes/--spares"
        )
    exposure = Exposure(
        nodes=settings.nodes,
        job_nodes=job_nodes,
        gpus_per_node=settings.gpus_per_node,
        seconds=settings.seconds,
        warning_share=settings.warning_share,
        warning_lead=settings.warning_lead,
        lemons=settings.lemons,
        lemon_factor=settings.lemon_factor,
        stragglers=settings.stragglers_per_node_year / YEAR,
        slowdown=(settings.realism.straggler_floor, assumptions.straggler_slowdown[1]),
        realism=settings.realism,
    )
    faults = schedule(mix(settings.mix, node_mtbf=settings.node_mtbf), exposure, seed=settings.seed)
    clock = Clock()
    created = at(-DAY)
    world = World(
        clock=clock,
        settings=settings,
        assumptions=assumptions,
        pool=settings.nodes,
        job_nodes=job_nodes,
        created=created,
        lemons=lemon_nodes(exposure, seed=settings.seed),
        device_plugin=contender.device_plugin,
    )
    people = People(world, settings, everything=contender.baseline)
    world.people = people
    operator = None
    if spec is not None:
        operator = Operator(
            world, contender=contender, spec=spec, assumptions=assumptions, created=created
        )
        world.operator = operator
    _begin(world, operator, job_nodes, assumptions)
    for fault in faults:
        clock.at(fault.onset, world.onset, fault)
    days = int(settings.seconds // DAY)
    for day in range(1, days + 1):
        clock.at(day * DAY, world.job.day, day)
    fleet = _FleetAccount(world)
    hour = HOUR
    while hour < settings.seconds:
        clock.at(hour, fleet.tick)
        hour += HOUR
    with _settled():
        clock.run(settings.seconds)
    world.job.finish()
    fleet.tick()
    return _outcome(
        contender=contender,
        settings=settings,
        world=world,
        operator=operator,
        people=people,
        fleet=fleet,
        job_nodes=job_nodes,
        spares=spares,
    )


@contextmanager
def _settled() -> Iterator[None]:
    """The fleet, its schedule of faults and its timers built, the garbage collector
    leaves them alone while the clock runs: a full collection, which each restart of
    a job of thousands of pods brings on (every pod is built again), would scan every
    node, status and fault each time, and at 16,384 nodes that took two thirds of
    the run. What the run allocates from here on is collected, the young of it every
    :data:`YOUNG` allocations (a restart allocates tens of thousands of pods at once);
    a later run in the same process as usual."""
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(YOUNG, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def _begin(
    world: World, operator: Operator | None, job_nodes: int, assumptions: Assumptions
) -> None:
    """The job runs on the first nodes; Pitcrew (if any) adopts every node and holds its
    spares among the others; the rest run other work."""
    job = world.job
    for rank in range(job_nodes):
        node = world.nodes[rank]
        node.images_at = 0.0  # the job ran there before the run began
        job.assign(rank, node)
        node.job = True
    job.begin()
    rest = world.nodes[job_nodes:]
    if operator is not None:
        operator.start(world.nodes, decide_now=rest)
    # Other work takes what the spare pool did not (its taints are on by then).
    for node in rest:
        world.clock.at(2 * assumptions.exec_latency, world.refresh, node)


class _FleetAccount:
    """The pool's GPU-seconds by phase through the real fleet ledger."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.ledger = FleetLedger(last=at(0.0))
        self.seconds: dict[Phase, float] = {}

    def tick(self) -> None:
        world = self.world
        counts = dict(world.phase_gpus)
        entries: list[NodeTime] = []
        for index in sorted(world.changed):
            node = world.nodes[index]
            counts[node.phase] = counts.get(node.phase, 0) - node.gpus
            transitions = (*node.history, *node.status.history)
            entries.append(
                NodeTime(POOL, node.phase, node.gpus, name=node.name, transitions=transitions)
            )
        world.changed.clear()
        entries.extend(NodeTime(POOL, phase, gpus) for phase, gpus in counts.items() if gpus > 0)
        for (_, phase), value in self.ledger.tick(entries, world.clock.datetime).items():
            self.seconds[phase] = self.seconds.get(phase, 0.0) + value

    @property
    def goodput(self) -> float:
        total = sum(self.seconds.values())
        up = sum(v for p, v in self.seconds.items() if p in IN_SERVICE)
        return up / total if total > 0 else 1.0


def _outcome(
    *,
    contender: Contender,
    settings: Settings,
    world: World,
    operator: Operator | None,
    people: People,
    fleet: _FleetAccount,
    job_nodes: int,
    spares: int,
) -> Outcome:
    job = world.job
    totals = job.totals
    seconds = totals.seconds
    wall = sum(seconds.values()) or settings.seconds
    down = seconds.get(RECOVERY, 0.0) + seconds.get(WAITING, 0.0)
    capacity = min(totals.capacity, down)
    rolled_back = totals.rolled_back  # credited productive by the ledger, then thrown away
    badput = {
        "wastedProgress": (seconds.get(WASTED, 0.0) + rolled_back) / wall,
        "recovery": (down - capacity) / wall,
        "waitingForCapacity": capacity / wall,
        "checkpointing": totals.checkpointing / wall,
    }
    training = seconds.get(PRODUCTIVE, 0.0) - totals.checkpointing - rolled_back
    goodput = training / wall
    stragglers = Stragglers(
        faults=world.stragglers,
        hours=totals.straggling / HOUR,
        throughput_lost=totals.slowed / wall,
        mfu_lost=totals.slowed / training if training > 0 else 0.0,
    )
    return Outcome(
        name=contender.name,
        hours=settings.seconds / HOUR,
        job_nodes=job_nodes,
        spares=spares,
        job_goodput=goodput,
        fleet_goodput=fleet.goodput,
        badput=badput,
        interruptions=sum(totals.interruptions.values()),
        hangs=totals.hangs,
        crashes=totals.crashes,
        node_fault_interruptions=totals.interruptions.get("nodeFault", 0),
        faults=world.struck,
        daily=_daily(totals.daily),
        fleet_seconds={str(p): v for p, v in sorted(fleet.seconds.items())},
        decisions=operator.decisions if operator else 0,
        decide_cpu_seconds=operator.cpu if operator else 0.0,
        events=world.clock.ran,
        records=dict(operator.records) if operator else {},
        breaker_trips=operator.breaker_trips if operator else 0,
        repairs_by_hand=people.repairs,
        rmas=people.rmas,
        stragglers=stragglers,
    )


def _daily(
    snapshots: list[tuple[float, dict[str, float], float]],
) -> tuple[tuple[float, float], ...]:
    """Each day's own goodput, from the ledger's running totals at each day's end."""
    out: list[tuple[float, float]] = []
    last: dict[str, float] = {}
    last_checkpointing = 0.0
    for day, totals, checkpointing in snapshots:
        delta = {k: v - last.get(k, 0.0) for k, v in totals.items()}
        wall = sum(delta.values())
        if wall > 0:
            productive = delta.get(PRODUCTIVE, 0.0) - (checkpointing - last_checkpointing)
            out.append((day, productive / wall))
        last, last_checkpointing = totals, checkpointing
    return tuple(out)

"""The operator's round loop and the simulator decide alike: one round, two shells.

Both shells decide through :func:`pitcrew.core.round.decide_round`; what each does
around it (reading its nodes, counting plans in flight, landing them) is its own.
Hypothesis drives both with the same events on the same pool: an agent reports a
fault or a clean node, a round decides some nodes, a plan in flight lands. After
every round both must have planned the same decisions, and after every event both
must count the pool the same way: a shell that changes how it counts a node taken
out, one coming back, a plan in flight or a spare fails here.

The world's answers are held still in both (no clock advances, no pods, the
breaker does not turn: it is policy status, written apart from the round), so
what is compared is the deciding and the counting, not two models of a cluster.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpuhealth.report import FaultClass
from pitcrew.api.policy import GPUHealthPolicySpec
from pitcrew.core.lifecycle import Decision
from pitcrew.core.round import Decided
from pitcrew.core.views import FleetView
from pitcrew.simulate.clock import Clock, at
from pitcrew.simulate.control import Operator
from pitcrew.simulate.settings import Assumptions, Contender, Settings
from pitcrew.simulate.world import World
from support.shell_fakes import Shell, healthy_status, policy_object, version

NODES = 4
NAMES = [f"gpu-{i:05d}" for i in range(NODES)]
POLICY = "fleet"
NOW = at(0)
Planned = tuple[str, str, str, tuple[str, ...], bool]


def planned(node: str, decision: Decision) -> Planned:
    """What a plan does, as both shells can state it: phase, reason, actions, held."""
    kinds = tuple(type(x).__name__ for x in decision.actions)
    return (node, decision.phase, decision.status.reason, kinds, decision.held)


class HeldByNode(Executor):
    """The operator's worker pool, holding each node's plan until the test lands it."""

    def __init__(self) -> None:
        self.held: dict[str, Callable[[], Any]] = {}

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()

        def call() -> None:
            future.set_result(fn(*args, **kwargs))

        self.held[args[0].node] = call
        return future

    submit_first = submit  # a plan's cordon, then its rest: both land with the node


class StillClock(Clock):
    """The simulator's clock held at its start: a plan's landing is kept for the test
    to call; every other timer (a probe's run, a repair, a resync) never comes."""

    def __init__(self) -> None:
        super().__init__()
        self.landings: dict[str, Callable[[], None]] = {}

    def at(self, when: float, callback: Callable[..., None], *args: Any) -> None:
        if getattr(callback, "__name__", "") == "_execute":
            self.landings[args[0].name] = lambda: callback(*args)


class OperatorShell:
    """The round loop, executor and store of :class:`support.shell_fakes.Shell`."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.pool = HeldByNode()
        self.shell = Shell(
            nodes={n: healthy_status(at=NOW) for n in NAMES},
            policy=policy_object(**spec),
            pool=self.pool,
            now=NOW,
        )
        self.shell.settle()

    def report(self, name: str, fault: FaultClass | None) -> None:
        written = copy.deepcopy(self.shell.store.gpunode(name))
        assert written is not None
        status = healthy_status(fault=fault, at=NOW).model_dump(mode="json", by_alias=True)
        written["status"]["checks"] = status["checks"]
        written["metadata"]["resourceVersion"] = version()
        self.shell.store.put("gpunode", written)

    def decide(self, names: list[str]) -> list[Planned]:
        return sorted(planned(p.node, p.decision) for p in self.shell.round(*names))

    def land(self, name: str) -> None:
        while name in self.pool.held:
            self.pool.held.pop(name)()

    def in_flight(self) -> set[str]:
        return set(self.shell.rounds.in_flight)

    def fleet(self) -> FleetView:
        return self.shell.rounds.fleet(POLICY)


class SimulatorShell:
    """:class:`pitcrew.simulate.control.Operator` on a world that does not move."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.clock = StillClock()
        world = World(
            clock=self.clock,
            settings=Settings(nodes=NODES, job_nodes=0, days=1),
            assumptions=Assumptions(),
            pool=NODES,
            job_nodes=0,
            created=at(-86400),
            lemons=frozenset(),
            device_plugin=True,
        )
        world.refresh = lambda node: None
        world.evict = lambda node, force: None
        policy = GPUHealthPolicySpec.model_validate(policy_object(**spec)["spec"])
        self.operator = Operator(
            world,
            contender=Contender(POLICY, policy),
            spec=policy,
            assumptions=Assumptions(),
            created=at(-86400),
        )
        world.operator = self.operator
        self.operator._breaker = lambda: None
        self.decided: list[Decided] = []
        apply = self.operator._apply

        def recorded(node: Any, decided: Decided) -> None:
            self.decided.append(decided)
            apply(node, decided)

        self.operator._apply = recorded
        self.operator.start(world.nodes, decide_now=[])
        self.world = world
        for node in world.nodes:  # the operator shell's GPUNodes, as written before its policy
            self.operator._set_status(node, healthy_status(at=NOW))
        for _ in range(5):  # as Shell.settle: rounds of every node until nothing changes
            if not self.decide(NAMES):
                break
            for name in NAMES:
                self.land(name)

    def report(self, name: str, fault: FaultClass | None) -> None:
        node = self.world.by_name[name]
        checks = healthy_status(fault=fault, at=NOW).checks
        self.operator._set_status(node, node.status.model_copy(update={"checks": checks}))

    def decide(self, names: list[str]) -> list[Planned]:
        self.decided = []
        self.operator.dirty = {self.world.by_name[n].index for n in names}
        self.operator._round()
        return sorted(planned(d.node, d.decision) for d in self.decided if d.changes)

    def land(self, name: str) -> None:
        landing = self.clock.landings.pop(name, None)
        if landing is not None:
            landing()

    def in_flight(self) -> set[str]:
        return {n.name for n in self.world.nodes if n.in_flight}

    def fleet(self) -> FleetView:
        return self.operator.snapshot()


@dataclass(frozen=True)
class Report:
    node: int
    fault: FaultClass | None


@dataclass(frozen=True)
class Decide:
    nodes: frozenset[int]


@dataclass(frozen=True)
class Land:
    node: int


EVENTS = st.one_of(
    st.builds(
        Report,
        st.integers(0, NODES - 1),
        st.sampled_from([None, FaultClass.FATAL, FaultClass.DEGRADED]),
    ),
    st.builds(Decide, st.frozensets(st.integers(0, NODES - 1), min_size=1)),
    st.builds(Land, st.integers(0, NODES - 1)),
)
SPECS = st.fixed_dictionaries(
    {
        "safety": st.fixed_dictionaries(
            {
                "maxUnhealthy": st.integers(1, 4),
                "maxConcurrentDrains": st.integers(1, 2),
                "maxConcurrentRemediations": st.integers(1, 2),
            }
        ),
        "spares": st.fixed_dictionaries({"count": st.integers(0, 2)}),
    }
)


def same_pool(a: FleetView, b: FleetView) -> bool:
    return (a.total, a.phases, a.spares, a.refused, a.verifying) == (
        b.total,
        b.phases,
        b.spares,
        b.refused,
        b.verifying,
    )


COMING_BACK = [
    Report(0, FaultClass.DEGRADED),
    Decide(frozenset({0})),  # Suspect, its cordon in flight
    Land(0),
    Report(0, None),
    Decide(frozenset({0})),  # back in service, in flight: still out until it lands
    Report(1, FaultClass.FATAL),
    Decide(frozenset({1})),  # so the one slot is not free for node 1 yet
    Land(0),
    Decide(frozenset({1})),
]
SLOTS = {"safety": {"maxUnhealthy": 1, "maxConcurrentDrains": 1, "maxConcurrentRemediations": 1}}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=SPECS, events=st.lists(EVENTS, min_size=1, max_size=30))
@example(spec={**SLOTS, "spares": {"count": 0}}, events=COMING_BACK)
@example(spec={**SLOTS, "spares": {"count": 1}}, events=COMING_BACK)
def test_both_shells_take_the_same_decisions_and_count_the_pool_alike(
    spec: dict[str, Any], events: list[Report | Decide | Land]
) -> None:
    operator, simulator = OperatorShell(spec), SimulatorShell(spec)
    assert same_pool(operator.fleet(), simulator.fleet())
    for event in events:
        match event:
            case Report(node=i, fault=fault):
                if NAMES[i] in operator.in_flight():
                    continue  # an agent's report beside a plan in flight: not modelled alike
                operator.report(NAMES[i], fault)
                simulator.report(NAMES[i], fault)
            case Decide(nodes=nodes):
                names = [NAMES[i] for i in sorted(nodes)]
                assert operator.decide(names) == simulator.decide(names), event
            case Land(node=i):
                operator.land(NAMES[i])
                simulator.land(NAMES[i])
        assert operator.in_flight() == simulator.in_flight(), event
        assert same_pool(operator.fleet(), simulator.fleet()), event

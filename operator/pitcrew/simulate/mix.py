"""Failure processes: which faults happen, how often, and how each one shows.

A *mix* is a set of fault classes with their rates. ``llama3-405b`` is the
root-cause table of the Llama 3 paper ("The Llama 3 Herd of Models", Meta 2024,
Table 5): 419 unexpected interruptions of one job on 16,384 H100s (2,048 nodes)
in a 54-day snapshot, plus 47 planned ones. Each count becomes a rate per node
(node faults) or per job node (faults of the job itself), so a smaller fleet or
job sees proportionally fewer. ``exponential`` is one fatal GPU fault class at
``--node-mtbf``, for checks against the analytic expectation.

How a class shows decides who can act on it:

- ``gpu``: the node agent reports a finding (an XID, an ECC or row-remap
  finding, a link down): Pitcrew sees it within a check interval. Classes with a
  degraded precursor (``warning``) show it ahead of the crash for a share of
  their faults (``--warning-share``, conservative by default).
- ``host``: the host stops (disk, power supply, board, CPU, memory): the agent
  goes silent, Kubernetes marks the node NotReady, a person repairs it.
- ``maintenance``: the host is taken away without warning and comes back.
- ``silent``: silent data corruption: nothing for a check to see; the job's own
  numerics notice, a person finds and repairs the node.
- ``job`` and ``hang``: the job crashes, or hangs until the NCCL watchdog, with
  no node at fault; a restart is all it takes.
- ``slow``: a straggler: a GPU that runs slow (a clock stuck low, a bad power
  stage, a link trained down) while every check passes and nothing crashes. A
  synchronous job steps at its slowest rank's pace, so the whole job slows down
  while it runs there: the job's own reports (Pitcrew) or its owners (people)
  notice. Llama 3's table counts interruptions, and a straggler interrupts
  nothing, so its rate is a separate, stated assumption (``--stragglers-per-node-year``).

A fault needs a repair of some *depth*: a GPU reset clears it, or a reboot, a
reimage, or a part must be replaced. The depths per class are stated
assumptions (docs/goodput.md).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from enum import IntEnum, StrEnum

from gpuhealth.report import FaultClass
from pitcrew.simulate import timing
from pitcrew.simulate.realism import KIND, Realism
from pitcrew.simulate.timing import DAY, LogNormal

LLAMA3_DAYS = 54.0
LLAMA3_NODES = 2048
LLAMA3_PLANNED = 47


class Shows(StrEnum):
    GPU = "gpu"
    HOST = "host"
    MAINTENANCE = "maintenance"
    SILENT = "silent"
    JOB = "job"
    HANG = "hang"
    SLOW = "slow"


NODE_SHOWS = frozenset({Shows.GPU, Shows.HOST, Shows.MAINTENANCE, Shows.SILENT, Shows.SLOW})
MAY_HANG = frozenset({Shows.GPU, Shows.JOB})
"""GPU, network and software faults: in the realistic world a share of them hang the
job instead of crashing it (:attr:`.realism.Realism.hang_share`)."""
RACK_KIND = "power supply"
"""The class a rack's power fault (its PDU or power shelf) is counted under."""
LEAF_KIND = "network switch/cable"
"""The class a leaf switch's fault is counted under."""


class Depth(IntEnum):
    """The least repair that clears a fault."""

    NONE = 0
    RESET = 1
    REBOOT = 2
    REIMAGE = 3
    HARDWARE = 4


@dataclass(frozen=True)
class Symptom:
    """What the node agent reports: a failing gpuhealth check."""

    check: str
    fault_class: FaultClass
    message: str


@dataclass(frozen=True)
class FaultKind:
    name: str
    count: float
    """Interruptions of this class in the Llama 3 snapshot (or a rate weight)."""
    shows: Shows
    crash: Symptom | None = None
    """The finding once the fault has crashed the job (``gpu`` classes)."""
    warning: Symptom | None = None
    """A degraded precursor gpuhealth can see before the crash, if the class has one."""
    depth: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    """Probabilities that a reset, a reboot, a reimage or a new part is the least repair."""
    part: LogNormal = timing.HOST_PART
    """How long a person takes to replace the part."""

    @property
    def device_plugin_sees(self) -> bool:
        """The NVIDIA device plugin's health check marks the GPU unhealthy when it
        crashes: it watches NVML's Xid events and skips only application errors, so
        a fatal Xid does; a network, thermal or host fault does not."""
        crash = self.crash
        return crash is not None and crash.check == "xid" and crash.fault_class is FaultClass.FATAL


def _xid(code: int, text: str) -> Symptom:
    return Symptom("xid", FaultClass.FATAL, f"XID {code}: {text}")


IB_DOWN = Symptom("ib", FaultClass.DEGRADED, "mlx5_0 is DOWN/Disabled")
IB_FLAPPING = Symptom("ib", FaultClass.DEGRADED, "mlx5_0 is flapping")
ROW_REMAP_PENDING = Symptom(
    "row-remap", FaultClass.DEGRADED, "row remap pending: takes effect at the next GPU reset"
)
SBE_STORM = Symptom("ecc", FaultClass.DEGRADED, "correctable ECC error storm")
THERMAL = Symptom("clock-events", FaultClass.DEGRADED, "thermal slowdown")

# fmt: off
LLAMA3: tuple[FaultKind, ...] = (
    FaultKind("faulty GPU", 148, Shows.GPU, _xid(79, "GPU has fallen off the bus"),
              None, (0.25, 0.45, 0.0, 0.30), timing.GPU_RMA),
    FaultKind("GPU HBM3 memory", 72, Shows.GPU, _xid(95, "uncontained ECC error"),
              ROW_REMAP_PENDING, (0.50, 0.20, 0.0, 0.30), timing.GPU_RMA),
    FaultKind("software bug", 54, Shows.JOB),
    FaultKind("network switch/cable", 35, Shows.GPU, IB_DOWN,
              IB_FLAPPING, (0.0, 0.20, 0.0, 0.80), timing.CABLE),
    FaultKind("host maintenance", 32, Shows.MAINTENANCE),
    FaultKind("GPU SRAM memory", 19, Shows.GPU, _xid(48, "double-bit ECC error"),
              SBE_STORM, (0.50, 0.30, 0.0, 0.20), timing.GPU_RMA),
    FaultKind("GPU system processor", 17, Shows.GPU, _xid(119, "GSP RPC timeout"),
              None, (0.10, 0.80, 0.0, 0.10), timing.GPU_RMA),
    FaultKind("NIC", 7, Shows.GPU, IB_DOWN, IB_FLAPPING, (0.0, 0.30, 0.0, 0.70), timing.CABLE),
    FaultKind("NCCL watchdog timeouts", 7, Shows.HANG),
    FaultKind("silent data corruption", 6, Shows.SILENT, depth=(0.0, 0.0, 0.0, 1.0),
              part=timing.GPU_RMA),
    FaultKind("GPU thermal interface and sensor", 6, Shows.GPU,
              _xid(79, "GPU has fallen off the bus"), THERMAL, (0.0, 0.30, 0.0, 0.70),
              timing.GPU_RMA),
    FaultKind("SSD", 3, Shows.HOST, depth=(0.0, 0.0, 0.0, 1.0)),
    FaultKind("power supply", 3, Shows.HOST, depth=(0.0, 0.0, 0.0, 1.0)),
    FaultKind("server chassis", 2, Shows.HOST, depth=(0.0, 0.0, 0.0, 1.0)),
    FaultKind("IO expansion board", 2, Shows.HOST, depth=(0.0, 0.0, 0.0, 1.0)),
    FaultKind("dependency", 2, Shows.JOB),
    FaultKind("CPU", 2, Shows.HOST, depth=(0.0, 0.0, 0.0, 1.0)),
    FaultKind("system memory", 2, Shows.HOST, depth=(0.0, 0.0, 0.0, 1.0)),
)
# fmt: on
STRAGGLER = FaultKind(
    "straggler", 0, Shows.SLOW, depth=(0.30, 0.30, 0.0, 0.40), part=timing.GPU_RMA
)
"""A GPU that runs slow. Not in the Llama 3 table, which counts interruptions; its
rate, its slowdown (:attr:`Exposure.slowdown`) and its depths are stated assumptions
(docs/goodput.md): a clock stuck low clears with a reset, a link trained down with a
reboot, a bad power stage or a degraded NVLink needs a new part (RMA)."""
EXPONENTIAL = FaultKind(
    "exponential", 1.0, Shows.GPU, _xid(79, "GPU has fallen off the bus"), None, (1.0, 0, 0, 0)
)
MIXES = ("llama3-405b", "exponential")


@dataclass(frozen=True)
class Mix:
    name: str
    kinds: tuple[FaultKind, ...]
    rates: tuple[float, ...]
    """Per node-second (node classes) or per job-node-second (job and hang classes)."""
    planned_rate: float
    """Planned interruptions per job-node-second."""

    @property
    def node_mtbf(self) -> float:
        """Seconds between unexpected interruptions per node, all classes."""
        return 1.0 / sum(self.rates)


def mix(name: str, *, node_mtbf: float | None = None) -> Mix:
    """The named mix; ``node_mtbf`` rescales its unexpected classes (shares unchanged)."""
    exposure = LLAMA3_DAYS * DAY * LLAMA3_NODES
    if name == "exponential":
        return Mix(name, (EXPONENTIAL,), (1.0 / (node_mtbf or 6000 * 3600.0),), 0.0)
    if name != "llama3-405b":
        raise ValueError(f"unknown mix {name!r}; known: {', '.join(MIXES)}")
    rates = tuple(k.count / exposure for k in LLAMA3)
    if node_mtbf is not None:
        scale = 1.0 / (node_mtbf * sum(rates))
        rates = tuple(r * scale for r in rates)
    return Mix(name, LLAMA3, rates, LLAMA3_PLANNED / exposure)


@dataclass
class Fault:
    """One fault of one run: when it shows, when it crashes, what it needs."""

    id: int
    kind: FaultKind
    node: int | None
    """Index of the node it strikes; None for a fault of the job itself."""
    onset: float
    """Seconds from the start: the precursor (if warned) or the crash."""
    crash: float
    warned: bool
    depth: Depth
    gpu: int
    rng: random.Random = field(repr=False)
    """This fault's own random stream: its durations do not depend on the policy's
    earlier draws, so every policy meets the same faults with the same luck."""
    z: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """Standard normal draws for the person's delays (noticing, the ticket, the fix),
    drawn with the fault so that every policy's people are equally quick with it."""
    planned: bool = False
    slowdown: float = 1.0
    """A straggler's step time over a healthy one's, with this node in the job (drawn
    with the fault: every policy meets the same straggler); 1 for every other class."""
    hangs: bool = False
    """The job hangs instead of crashing (the realistic world's ``hang_share``)."""
    group: tuple[int, ...] = ()
    """Every node a rack or leaf switch fault takes at once (this one among them);
    empty for a fault of one node."""
    idle: float = 0.0
    """A uniform draw: the fault strikes a node that runs nothing only if it is below
    the world's ``idle_fault_share`` (drawn with the fault, the same for every policy)."""
    late_z: float = 0.0
    """A standard normal draw for how late silent data corruption is found."""


@dataclass(frozen=True)
class Exposure:
    nodes: int
    job_nodes: int
    gpus_per_node: int
    seconds: float
    warning_share: float
    warning_lead: float
    lemons: int = 0
    lemon_factor: float = 10.0
    stragglers: float = 0.0
    """Straggler faults per node-second (:data:`STRAGGLER`); 0: none."""
    slowdown: tuple[float, float] = (1.2, 2.0)
    """A straggler's slowdown is drawn uniformly from this range."""
    realism: Realism = KIND
    """Hangs and rack or leaf switch faults (the realistic world); :data:`.realism.KIND`:
    none, and no draw for them, so the kind world's faults are what they were."""


def schedule(the_mix: Mix, exposure: Exposure, *, seed: int) -> list[Fault]:
    """Every fault of a run, sorted by onset: a Poisson process per node (a lemon node
    at ``lemon_factor`` times the rate), one for the job's own faults and one for
    planned interruptions. Each has its own seeded stream, so node ``n`` meets the
    same faults whatever the pool's size and every policy meets the same faults (a
    fault that strikes a node already broken is dropped by the run, which depends
    on the policy). Stragglers come from a stream of their own per node: their rate
    is not the mix's, and with or without them the mix's faults are the same."""
    node_kinds = [
        (k, r) for k, r in zip(the_mix.kinds, the_mix.rates, strict=True) if k.shows in NODE_SHOWS
    ]
    job_kinds = [
        (k, r)
        for k, r in zip(the_mix.kinds, the_mix.rates, strict=True)
        if k.shows not in NODE_SHOWS
    ]
    slow_kinds = [(STRAGGLER, exposure.stragglers)]
    lemons = lemon_nodes(exposure, seed=seed)
    faults: list[Fault] = []
    for node in range(exposure.nodes):
        factor = exposure.lemon_factor if node in lemons else 1.0
        faults += _arrivals(f"{seed}:node:{node}", node_kinds, factor, node, exposure)
        faults += _arrivals(f"{seed}:slow:{node}", slow_kinds, factor, node, exposure)
    faults += _arrivals(f"{seed}:job", job_kinds, float(exposure.job_nodes), None, exposure)
    planned = [(FaultKind("planned", 0, Shows.JOB), the_mix.planned_rate)]
    for fault in _arrivals(f"{seed}:planned", planned, float(exposure.job_nodes), None, exposure):
        fault.planned = True
        faults.append(fault)
    faults += _groups(faults, exposure)
    faults.sort(key=lambda f: (f.onset, f.node if f.node is not None else -1))
    for index, fault in enumerate(faults):
        fault.id = index
    return faults


def _groups(faults: list[Fault], exposure: Exposure) -> list[Fault]:
    """The other nodes of each rack or leaf switch fault: the same fault at the same
    instant on every node of the group, with the same luck (delays, depth)."""
    out: list[Fault] = []
    for fault in faults:
        origin = fault.node
        for member in fault.group:
            if member != origin:
                rng = random.Random(f"{origin}:{fault.onset}:{member}")  # noqa: S311
                out.append(replace(fault, node=member, rng=rng))
    return out


def _group(kind: FaultKind, node: int | None, draw: float, exposure: Exposure) -> tuple[int, ...]:
    """The nodes a fault of ``kind`` on ``node`` takes, if it is a rack's power or a
    leaf switch (a share of its class, drawn with ``draw``)."""
    realism = exposure.realism
    size = 0
    if kind.name == RACK_KIND and draw < realism.rack_share:
        size = realism.rack_nodes
    elif kind.name == LEAF_KIND and draw < realism.leaf_share:
        size = realism.leaf_nodes
    if node is None or size <= 1:
        return ()
    first = node - node % size
    return tuple(range(first, min(first + size, exposure.nodes)))


def lemon_nodes(exposure: Exposure, *, seed: int) -> frozenset[int]:
    """The nodes that fail ``lemon_factor`` times as often: the same ones for every policy."""
    picker = random.Random(f"{seed}:lemons")  # noqa: S311 - a reproducible simulation
    return frozenset(picker.sample(range(exposure.nodes), min(exposure.lemons, exposure.nodes)))


def _arrivals(
    stream: str,
    kinds: list[tuple[FaultKind, float]],
    scale: float,
    node: int | None,
    exposure: Exposure,
) -> list[Fault]:
    total = scale * sum(r for _, r in kinds)
    if total <= 0:
        return []
    rng = random.Random(stream)  # noqa: S311
    realistic = exposure.realism != KIND
    out: list[Fault] = []
    t = rng.expovariate(total)
    while t < exposure.seconds:
        kind = rng.choices([k for k, _ in kinds], weights=[r for _, r in kinds])[0]
        warned = kind.warning is not None and rng.random() < exposure.warning_share
        lead = rng.expovariate(1.0 / exposure.warning_lead) if warned else 0.0
        depth = Depth.NONE
        if any(kind.depth):
            depth = Depth(rng.choices((1, 2, 3, 4), weights=kind.depth)[0])
        fault = Fault(
            id=0,
            kind=kind,
            node=node,
            onset=t,
            crash=t + lead,
            warned=warned,
            depth=depth,
            gpu=rng.randrange(exposure.gpus_per_node),
            rng=random.Random(f"{stream}:{len(out)}"),  # noqa: S311
            z=(rng.gauss(0.0, 1.0), rng.gauss(0.0, 1.0), rng.gauss(0.0, 1.0)),
            slowdown=rng.uniform(*exposure.slowdown) if kind.shows is Shows.SLOW else 1.0,
        )
        if realistic:
            _realistic(fault, random.Random(f"{stream}:{len(out)}:world"), exposure)  # noqa: S311
        out.append(fault)
        t += rng.expovariate(total)
    return out


def _realistic(fault: Fault, rng: random.Random, exposure: Exposure) -> None:
    """The realistic world's draws for a fault, from a stream of their own, so that the
    fault's own (its kind, onset, depth, delays) are the kind world's."""
    kind = fault.kind
    fault.hangs = kind.shows in MAY_HANG and rng.random() < exposure.realism.hang_share
    fault.group = _group(kind, fault.node, rng.random(), exposure)
    if fault.group:
        fault.depth = Depth.HARDWARE  # the switch or the rack's power, not the node
    fault.idle = rng.random()
    fault.late_z = rng.gauss(0.0, 1.0)

"""How unkind the simulated world is: ``--world realistic`` (the default) or ``kind``.

The ``kind`` world is the simulator as it was first written: every fault
crashes the job at once, pods run the moment they are created (no image to
pull), a restart always takes ``--restart-cost`` and always works, an
asynchronous checkpoint costs training nothing, one fault takes one node,
faults strike a node whether it runs work or idles, silent data corruption crashes the job when
it strikes, every straggler is slow enough for Pitcrew's threshold, and a
spare is always free when the job needs it. It stays for comparison with
earlier figures, and it reproduces them exactly.

The ``realistic`` world drops each of those kindnesses. Each number is a
:class:`Realism` field with its source (docs/goodput.md, "A world that is not
kind", cites them all) and a sensitivity sweep in ``--report``
(:data:`SWEEPS`), since most are assumptions where no published figure
exists. Where a field is 0 (or, for ``idle_fault_share``, 1) the world is as
kind as before in that respect, so each can be switched off on its own.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from enum import StrEnum

from pitcrew.simulate.timing import HOUR, spread

DEVCLUSTER_POD_START = 31.0
"""Seconds from creating a pod to its running, the median the devcluster measured
for 1,500 replacement pods (docs/benchmarks.md, the drain of 750 training-like
nodes: p50 31 s, p90 62 s, max 81 s)."""
DEVCLUSTER_PODS = 1500
DEVCLUSTER_LAST_POD = 81.0
"""Seconds until the last of those 1,500 pods ran: the control plane's throughput
sets the rest (50 s for 1,500 pods)."""


class WorldKind(StrEnum):
    REALISTIC = "realistic"
    KIND = "kind"


WORLDS = tuple(w.value for w in WorldKind)


@dataclass(frozen=True)
class Realism:
    """What the realistic world adds; every default here is the ``realistic`` world's,
    and :data:`KIND` turns each off."""

    hang_share: float = 0.2
    """Share of the GPU, network and software faults that hang the job (progress stops,
    pods run) instead of crashing it, until the NCCL watchdog (10 min) or Pitcrew ends
    it. An assumption: Llama 3 counts only the hangs it could not attribute (7 of 419),
    ByteRobust and MegaScale name hangs as a main class without a share."""
    pod_start: float | None = None
    """Seconds from the job's pods created to the last of them running; None: the
    devcluster's measurement at the job's size (:func:`pod_start`)."""
    image_pull: float = 180.0
    """Seconds a node takes to pull the job's images when it holds none of them, added
    to the pod start of a restart that places a rank there (the kubelet pulls once the
    pod is bound; the devcluster's kwok nodes pull nothing, so :func:`pod_start` holds
    no pull). A node keeps the images of the job's pods it ran, and a spare gets them
    ahead of need where the policy pre-pulls (``spares.prePullImages``). An assumption:
    the NGC PyTorch image is about 10 GB compressed and 20 GB unpacked, and containerd's
    default snapshotter fetches and unpacks every layer before the container starts;
    AWS reports several minutes for such images (docs/goodput.md)."""
    restart_spread: float = 2.0
    """A restart's 90th percentile over its median (``--restart-cost``): log-normal.
    An assumption (NCCL initialisation and checkpoint loads vary with the storage's
    load)."""
    restart_failure: float = 0.1
    """Share of restarts that fail (a rank that cannot initialise NCCL, a checkpoint
    that fails to load) and crash again after the restart's time. An assumption:
    ByteRobust sends a job whose restart fails again to its stop-time checks, without
    a rate."""
    snapshot_stall: float = 1.0
    """Seconds training stops per asynchronous checkpoint while the state is copied to
    host memory; the write goes on behind it. Llama 3 405B's weights and optimizer
    state (about 16 bytes a parameter) over 16,384 GPUs are 0.4 GB a GPU, tens of
    milliseconds over PCIe; the synchronisation around the copy makes it about a second
    (CheckFreq's snapshot phase, Gemini's in-memory checkpoints). An assumption."""
    sdc_detection: float = 1 * HOUR
    """Median time until silent data corruption shows (a loss spike, a numerics
    check); the job then rolls back to its last checkpoint from before the corruption
    began, past the last checkpoint. 0: found at once (the job crashes when it strikes).
    An assumption."""
    straggler_floor: float = 1.05
    """Smallest straggler slowdown drawn (up to 2x): stragglers between 5 % and the
    policy's 20 % threshold are below Pitcrew's detection. An assumption."""
    spare_contention: float = 0.25
    """Share of reserved spares that other work had borrowed (a spare is taken by other
    work unless reserved): the job's pod waits for the reclaim (``reclaim_delay``, 5 min)
    instead of landing at once. An assumption."""
    idle_fault_share: float = 0.0
    """A node that runs nothing fails at this share of a running node's rate: the
    Llama 3 rates are per hour of a node running the job. 1: idle nodes fail as often."""
    rack_nodes: int = 4
    """Nodes per rack: four 8-GPU servers at about 40 kW (NVIDIA's DGX H100 SuperPOD
    reference architecture)."""
    leaf_nodes: int = 32
    """Nodes behind one leaf switch: a SuperPOD scalable unit of 32 nodes per rail
    leaf."""
    rack_share: float = 0.5
    """Share of Llama 3's power supply faults that are the rack's power (its PDU or
    power shelf) and take every node of the rack at once. An assumption."""
    leaf_share: float = 0.1
    """Share of Llama 3's network switch/cable faults that are a leaf switch and take
    the fabric of every node behind it at once. An assumption."""


KIND = Realism(
    hang_share=0.0,
    restart_spread=1.0,
    restart_failure=0.0,
    snapshot_stall=0.0,
    sdc_detection=0.0,
    straggler_floor=1.2,
    spare_contention=0.0,
    idle_fault_share=1.0,
    rack_share=0.0,
    leaf_share=0.0,
    pod_start=0.0,
    image_pull=0.0,
)
"""The kind world: every kindness back, the figures of earlier versions exactly."""
REALISTIC = Realism()


def world(kind: WorldKind) -> Realism:
    return REALISTIC if kind is WorldKind.REALISTIC else KIND


def pod_start(realism: Realism, pods: int) -> float:
    """Seconds until the last of the job's ``pods`` runs: the set figure, or the
    devcluster's median for one pod plus its control plane's throughput at the job's
    size (about 99 s for 2,048 pods)."""
    if realism.pod_start is not None:
        return realism.pod_start
    per_pod = (DEVCLUSTER_LAST_POD - DEVCLUSTER_POD_START) / DEVCLUSTER_PODS
    return DEVCLUSTER_POD_START + pods * per_pod


class Restarts:
    """How long each of the job's restarts takes and whether it fails, from a stream of
    their own: the n-th restart of every policy's job is alike. In the kind world every
    restart takes ``cost`` and works, and nothing is drawn."""

    def __init__(self, realism: Realism, *, cost: float, seed: int) -> None:
        self.time = spread(cost, realism.restart_spread)
        self.failure = realism.restart_failure
        self.rng = random.Random(f"{seed}:restarts")  # noqa: S311

    def next(self) -> tuple[float, bool]:
        """Seconds the next restart takes, and whether it fails at their end."""
        if self.time.sigma == 0 and self.failure <= 0:
            return self.time.median, False
        took = self.time.draw(self.rng)
        return took, self.rng.random() < self.failure


@dataclass(frozen=True)
class Sweep:
    """One number of the world the report varies, holding the rest at the run's."""

    field: str
    label: str
    values: tuple[float, ...]


SWEEPS = (
    Sweep(
        "hang_share", "share of GPU, network and software faults that hang", (0.0, 0.1, 0.2, 0.4)
    ),
    Sweep("pod_start", "seconds to start the job's pods", (0.0, 50.0, 100.0, 200.0)),
    Sweep("image_pull", "seconds to pull the job's images onto a node", (0.0, 60.0, 180.0, 600.0)),
    Sweep("restart_spread", "restart time p90 / median", (1.0, 2.0, 4.0)),
    Sweep("restart_failure", "share of restarts that fail", (0.0, 0.1, 0.2)),
    Sweep("snapshot_stall", "seconds of stall per asynchronous snapshot", (0.0, 1.0, 5.0, 15.0)),
    Sweep("sdc_detection", "hours until silent corruption is found", (0.0, 1.0, 6.0, 24.0)),
    Sweep("straggler_floor", "smallest straggler slowdown", (1.2, 1.1, 1.05)),
    Sweep("spare_contention", "share of spares other work borrowed", (0.0, 0.25, 0.5)),
    Sweep("idle_fault_share", "fault rate of an idle node over a running one", (0.0, 0.5, 1.0)),
    Sweep("rack_share", "share of power supply faults that take a rack", (0.0, 0.5, 1.0)),
    Sweep("leaf_share", "share of network faults that take a leaf switch", (0.0, 0.1, 0.3)),
)
"""The sensitivity sweeps ``--report`` runs in the realistic world: each value runs the
stock cluster and the first Pitcrew policy (``sdc_detection`` in hours)."""


def varied(realism: Realism, sweep: Sweep, value: float) -> Realism:
    if sweep.field == "sdc_detection":
        value *= HOUR
    return replace(realism, **{sweep.field: value})  # type: ignore[arg-type]

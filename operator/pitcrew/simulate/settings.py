"""What one simulation is asked: the fleet, the job, the world's assumptions, the policy.

:class:`Settings` holds what the command line sets (``pitcrew simulate --help``);
:class:`Contender` is one policy to compare: one of the two clusters without
Pitcrew (``people``: nothing automatic but Kubernetes' NotReady eviction;
``stock``: that plus the NVIDIA device plugin's Xid health check, what a GPU
cluster runs out of the box) or a real ``GPUHealthPolicySpec`` (the defaults,
or a ``--policy FILE``), always on a stock cluster. Durations are seconds of
simulated time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from pitcrew.api.policy import GPUHealthPolicySpec
from pitcrew.simulate.realism import KIND, REALISTIC, Realism, WorldKind
from pitcrew.simulate.timing import HOUR, MINUTE

HEADROOM = 0.03
"""Share of the pool the job leaves to other work by default: a cluster is not sized to
its one job, and a job that needs every node waits for each repair."""
PEOPLE = "people"
"""No Pitcrew and no device plugin health check: people notice every fault."""
STOCK = "stock"
"""No Pitcrew, on a stock GPU cluster: the device plugin keeps a failed GPU's pods off it,
people do the rest. Gains are stated against it."""
DEFAULTS = "defaults"
SELECTOR = {"matchLabels": {"nvidia.com/gpu.present": "true"}}


@dataclass(frozen=True)
class Settings:
    nodes: int = 2112
    """Nodes of the pool the job runs in: the job's, the spares, other work."""
    gpus_per_node: int = 8
    days: float = 54.0
    mix: str = "llama3-405b"
    node_mtbf: float | None = None
    """Seconds; rescales the mix (``exponential``: its only rate)."""
    job_nodes: int | None = None
    """Nodes the job needs; default: the pool less :data:`HEADROOM` (2,048 of 2,112)."""
    step_time: float = 6.0
    checkpoint_interval: float = 30 * MINUTE
    """Training time between the end of one checkpoint and the start of the next."""
    checkpoint_cost: float = 1 * MINUTE
    async_checkpoint: bool = False
    """The job trains on while a checkpoint is written; it is durable ``checkpoint_cost``
    after it was taken. Otherwise training stops for ``checkpoint_cost``."""
    restart_cost: float = 10 * MINUTE
    """From the moment every pod of the job runs to training resumed: process start,
    NCCL initialisation, checkpoint load."""
    progress_lost_on_fault: bool = False
    """The job's pods declare ``pitcrew.dev/progress-lost-on-fault: "true"``: on a node
    with a fatal fault Pitcrew deletes them at once (the job's replacement is placed
    then) instead of evicting them (gone after the pods' termination)."""
    in_place_restart: bool = False
    """The job's pods declare a ``RestartAllContainers`` restart rule and run Pitcrew's
    hook: when Pitcrew takes a node from under the job, the pods elsewhere restart in
    place, and only the lost pod is created again (the start of one pod, not of the
    job's every pod)."""
    spares: int | None = None
    """Hot spares (``spares.count``) of every Pitcrew policy; default: each policy's own."""
    seed: int = 1
    warning_share: float = 0.1
    """Share of the faults of classes with a degraded precursor that show it before
    they crash the job."""
    warning_lead: float = 1 * HOUR
    """Mean time from a precursor to the crash (exponential)."""
    detection_delay: float = 30 * MINUTE
    """Median time for a person to notice a crashed job and find the node at fault."""
    ticket_delay: float = 4 * HOUR
    """Median time from a ticket to a person starting the repair."""
    reclaim_delay: float = 5 * MINUTE
    """Time for the job to take a node back from other work (priority preemption)."""
    lemons: int = 0
    lemon_factor: float = 10.0
    stragglers_per_node_year: float = 0.1
    """Straggler faults (a GPU that runs slow, nothing crashes, no check sees it) per
    node and year: an assumption, not published data (docs/goodput.md); 0: none."""
    straggler_notice_delay: float = 12 * HOUR
    """Median time for a person to notice that the job runs slow and find the node: a
    slow job crashes nothing, so it shows only on a throughput dashboard, and finding
    the one slow node of thousands takes per-rank timings or a bisection."""
    realism: Realism = REALISTIC
    """How unkind the world is (``--world``; :mod:`.realism`)."""

    @property
    def world(self) -> WorldKind:
        """``kind`` only when every kindness is back; any realistic figure makes the
        world realistic."""
        return WorldKind.KIND if self.realism == KIND else WorldKind.REALISTIC

    @property
    def seconds(self) -> float:
        return self.days * 24 * HOUR

    @property
    def job_size(self) -> int:
        """The same for every contender: spares come out of the headroom, not the job."""
        if self.job_nodes is not None:
            return self.job_nodes
        return max(1, self.nodes - math.ceil(self.nodes * HEADROOM))

    def with_(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Assumptions:
    """The world's figures the command line does not set (docs/goodput.md)."""

    exec_latency: float = 1.0
    """From a decision to its effect on the cluster (an API write, a watch event)."""
    pod_termination: float = 30.0
    """Kubernetes' default terminationGracePeriodSeconds: an evicted or crashed job's
    pods are gone, and the launcher's new ones created, this long after."""
    not_ready_eviction: float = 300.0
    """Kubernetes' default toleration of ``node.kubernetes.io/unreachable``: pods of a
    node that stopped answering are deleted after it."""
    watchdog: float = 10 * MINUTE
    """PyTorch's default NCCL collective timeout: a hung job crashes after it."""
    latent_share: float = 0.3
    """Share of the faults a repair did not clear that pass the passive checks
    afterwards (the fault shows again only under load)."""
    relapse_mean: float = 12 * HOUR
    """Mean time until such a hidden fault shows again (exponential)."""
    probe_finds_hidden: float = 0.9
    """Chance that a validation probe (GEMM, HBM, all-reduce under load) finds it."""
    resync: float = 15.0
    """After a bound moved (a node left Draining, the unhealthy count fell), the nodes
    it held are decided again this much later: the operator's periodic resync."""
    straggler_slowdown: tuple[float, float] = (1.2, 2.0)
    """A straggler's step time over a healthy one's, drawn uniformly per fault: from
    just at the policy's default threshold (20 % slower than the median) to half speed."""
    report_interval: float = 30.0
    """Seconds of training between two of rank 0's progress reports: the framework
    hooks' default (``TrainingReporter(min_interval=30)``)."""


@dataclass(frozen=True)
class Contender:
    """One policy of the comparison."""

    name: str
    spec: GPUHealthPolicySpec | None
    """None: a cluster without Pitcrew (``people`` or ``stock``)."""
    detection: bool = True
    """Pitcrew acts on the agent's findings at once; False: only once a person would
    have noticed the crash (the attribution's run without detection)."""
    device_plugin: bool = True
    """The NVIDIA device plugin's health check runs (every cluster but ``people``): a
    GPU that reported a fatal Xid is unhealthy, so the job's pod, recreated by its own
    restart, cannot land on that node again until it is repaired."""

    @property
    def baseline(self) -> bool:
        """Without Pitcrew: people do what the cluster does not."""
        return self.spec is None


def baselines() -> list[Contender]:
    """The two clusters without Pitcrew, as every comparison starts."""
    return [Contender(PEOPLE, None, device_plugin=False), Contender(STOCK, None)]


def default_spec() -> GPUHealthPolicySpec:
    return GPUHealthPolicySpec.model_validate({"nodeSelector": SELECTOR})


def with_spares(spec: GPUHealthPolicySpec, count: int) -> GPUHealthPolicySpec:
    """The policy with ``spares.count`` set (``--spares``, the sizing curve, a lever)."""
    return spec.model_copy(update={"spares": spec.spares.model_copy(update={"count": count})})

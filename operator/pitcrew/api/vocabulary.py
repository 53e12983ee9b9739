"""Every name Pitcrew puts on the cluster, defined once.

Labels, annotations and taints are part of Pitcrew's API as much as the CRDs
are: users select on them, alerts match them, other controllers tolerate
them, and a node agent reads what the operator wrote. A name spelled twice
drifts, so every module takes it from here. Simulation-only names use the
``sim.pitcrew.dev/`` prefix so that no production cluster ever carries one
by accident.

Phase groups live here too: "in service", "unhealthy" and "out of service"
are used by the decisions, the breaker, the ledgers and the CLI, and each
must mean the same everywhere.
"""

from __future__ import annotations

from typing import Final

from pitcrew.api.gpunode import Phase
from pitcrew.api.meta import GROUP

PREFIX: Final = GROUP
SIM_PREFIX: Final = f"sim.{GROUP}"

# -- on Nodes -------------------------------------------------------------------------------
MANAGED_LABEL: Final = f"{PREFIX}/managed"
"""``false`` opts a node out of Pitcrew (phase Excluded)."""
CORDONED_BY: Final = f"{PREFIX}/cordoned-by"
"""Set with Pitcrew's own cordon, so a person's cordon is never lifted."""
CORDONED_BY_VALUE: Final = "pitcrew"
VALIDATION_REQUEST: Final = f"{PREFIX}/validation-run"
"""The ValidationRun that holds this node out of service for a test."""
VALIDATION_SUITE: Final = f"{PREFIX}/validation-suite"
"""The suite that run asks for (``quick``, ``standard``, ``burn-in``)."""
LAST_REMEDIATION: Final = f"{PREFIX}/last-remediation"
"""JSON ``{action, key, at}`` of the last repair started; the agent reads it."""
BMC_ENDPOINT_ANNOTATION: Final = f"{PREFIX}/bmc-endpoint"
BMC_SYSTEM_ANNOTATION: Final = f"{PREFIX}/bmc-system"

QUARANTINE_TAINT: Final = f"{PREFIX}/quarantined"
SPARE_TAINT: Final = f"{PREFIX}/spare"
VALIDATING_TAINT: Final = f"{PREFIX}/validating"
RETIRED_TAINT: Final = f"{PREFIX}/retired"
RESERVED_TAINT: Final = f"{PREFIX}/reserved"
"""On a spare reserved for the training job that lost a node; its value names the job
(:func:`pitcrew.core.job_discovery.taint_value`), and only that job's pending pods get
the toleration (:mod:`pitcrew.core.lifecycle.reserved`)."""
PITCREW_TAINTS: Final = (
    QUARANTINE_TAINT,
    SPARE_TAINT,
    VALIDATING_TAINT,
    RETIRED_TAINT,
    RESERVED_TAINT,
)

# -- on training pods -------------------------------------------------------------------------
JOB_LABEL: Final = f"{PREFIX}/job"
"""Names the training job a pod belongs to (goodput accounting)."""
JOB_SIZE_LABEL: Final = f"{PREFIX}/job-size"
"""How many pods the job needs to run (waiting time when fewer are up)."""
PROGRESS_ANNOTATION: Final = f"{PREFIX}/progress"
"""JSON progress of rank 0: step, checkpoint step, times, FLOPs per step."""
HEARTBEAT_ANNOTATION: Final = f"{PREFIX}/heartbeat"
"""JSON heartbeat of the pod's ranks, written on the pod by its own local rank 0: its
rank, last step and when, its step time, a pause it announced (hang detection)."""
CHECKPOINT_ANNOTATION: Final = f"{PREFIX}/checkpoint-at"
"""When the pod last checkpointed: a checkpoint-aware drain waits for the next one."""
PROGRESS_LOST_ANNOTATION: Final = f"{PREFIX}/progress-lost-on-fault"
"""``"true"`` on a training job's pods: a fatal fault on any of its nodes loses the job's
progress anyway (it restarts from its last checkpoint whatever its pods do), so its pods
on such a node are deleted at once with :data:`FAST_GRACE_SECONDS` instead of evicted
with their own grace period and their budget's leave."""
FAST_GRACE_SECONDS: Final = 1
"""The grace period of a pod deleted at once (:data:`PROGRESS_LOST_ANNOTATION`): the
kubelet stops it, it is not removed from the API before it stopped (0 would)."""
RESTART_REQUESTED_ANNOTATION: Final = f"{PREFIX}/restart-requested"
"""Written by the operator on the surviving pods of a training job whose node it takes
out, where their containers declare a ``RestartAllContainers`` restart rule: the start
(RFC 3339) of the drain that took the node. The training hook
(:mod:`pitcrew.client.restart`) exits with the rule's exit code on a request newer than
its process, and the kubelet restarts the pod's containers in place
(:mod:`pitcrew.core.in_place`)."""
MAINTENANCE_REASON: Final = "Maintenance"
"""The reason a node is taken out for a maintenance window (Suspect, then Draining)."""
STRAGGLER_REASON: Final = "Straggler"
"""The reason a node is Suspect when its job's reports name it the slowest, again and
again (:mod:`pitcrew.core.stragglers`)."""
HANG_REASON: Final = "Hang"
"""The reason a node is Quarantined when it is the one its hung job is blamed on
(:mod:`pitcrew.core.hangs`)."""
SLURM_REASON_PREFIX: Final = "pitcrew: "
"""A Slurm drain whose reason starts so is Pitcrew's: the only one it ever resumes."""

# -- on Pitcrew's own Jobs and pods -------------------------------------------------------------
PROBE_LABEL: Final = f"{PREFIX}/probe"
NODE_LABEL: Final = f"{PREFIX}/node"
SUITE_LABEL: Final = f"{PREFIX}/suite"
REMEDIATION_LABEL: Final = f"{PREFIX}/remediation"
RUN_LABEL: Final = f"{PREFIX}/run"
PAIR_LABEL: Final = f"{PREFIX}/pair"
RANK_LABEL: Final = f"{PREFIX}/rank"
PAIR_ANNOTATION: Final = f"{PREFIX}/pair-name"
PRE_PULL_LABEL: Final = f"{PREFIX}/pre-pull"
"""On a pre-pull pod (:mod:`pitcrew.kube.prepull`): its key, from the spare and the image
set (:attr:`pitcrew.core.prepull.PrePull.key`)."""
ELECTION_LABEL: Final = f"{PREFIX}/election"
"""On the operator's Leases (its shards and its members'), the name of the cluster
shard's Lease: one LIST with it reads the whole election."""

# -- simulation only ----------------------------------------------------------------------------
SIMULATED_LABEL: Final = f"{PREFIX}/simulated"
"""Nodes whose GPUs are simulated (devcluster); the simulated agents serve them."""
RACK_LABEL: Final = f"topology.{PREFIX}/rack"
FAULTS_ANNOTATION: Final = f"{SIM_PREFIX}/faults"
REPAIR_FAILS_ANNOTATION: Final = f"{SIM_PREFIX}/repair-fails"
PROBE_FOR_ANNOTATION: Final = f"{SIM_PREFIX}/probe-for"
"""How long a probe pod runs on this simulated node (a Duration; default: sim-agents'
``--probe-seconds``)."""
CRASH_LOOP_ANNOTATION: Final = f"{SIM_PREFIX}/crash-loop"
"""On a pod of a simulated node: kwok runs it and never readies it, its container
restarting in CrashLoopBackOff (devcluster's ``stages.yaml``)."""

# -- NVIDIA's names, read from Nodes ------------------------------------------------------------
GPU_RESOURCE: Final = "nvidia.com/gpu"
GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"

# -- who writes: field managers, Event components, ServiceAccounts -----------------------------
DEFAULT_NAMESPACE: Final = "pitcrew-system"
"""Where Pitcrew runs unless told otherwise: the operator's Lease and Jobs, the agents,
``pitcrew install``'s objects (the chart installs into its release's namespace)."""
OPERATOR_MANAGER: Final = "pitcrew-operator"
AGENT_MANAGER: Final = "pitcrew-agent"
PROBE_MANAGER: Final = "pitcrew-probe"
PRE_PULL_MANAGER: Final = "pitcrew-pre-pull"
"""Owns ``GPUNode.status.images``, which the operator's pre-pull loop writes beside its
rounds (:mod:`pitcrew.controller.prepull`)."""
OPERATOR_COMPONENT: Final = OPERATOR_MANAGER


def account_name(component: str, prefix: str = "pitcrew") -> str:
    """The ServiceAccount of one component (``<release>-probe``, ...)."""
    return f"{prefix}-{component}"


# -- phase groups -------------------------------------------------------------------------------
IN_SERVICE: Final = frozenset({Phase.HEALTHY, Phase.SPARE})
"""Nodes that can take work (a spare is one taint away)."""
UNHEALTHY: Final = (
    Phase.SUSPECT,
    Phase.QUARANTINED,
    Phase.DRAINING,
    Phase.REMEDIATING,
    Phase.RETIRED,
)
"""The phases of a node taken out of service by Pitcrew for a fault: what the circuit
breaker counts (:attr:`pitcrew.core.views.FleetView.unhealthy`, which leaves out the
nodes in them on their way out for a maintenance window: planned work has a budget of
its own). Validating is not here: a batch of new nodes in burn-in must not trip it."""
OUT_BY_PITCREW: Final = (*UNHEALTHY, Phase.MAINTENANCE)
"""Out of service by Pitcrew's hand, for a fault or a maintenance window: a spare stands
in for each, and a node leaving one keeps its slot until its write lands."""
TAKEN_OUT: Final = frozenset({Phase.SUSPECT, Phase.QUARANTINED, Phase.DRAINING})
"""The first phases after a fault: leaving service for one of these is a detection."""
OUT_OF_SERVICE: Final = frozenset(
    {Phase.QUARANTINED, Phase.DRAINING, Phase.REMEDIATING, Phase.RETIRED}
)
"""Cordoned for a fault: a job on such a node was interrupted by it."""
SETTLED: Final = frozenset({Phase.HEALTHY, Phase.SPARE, Phase.PENDING, Phase.EXCLUDED})
"""Phases that need no attention from a person (``pitcrew status`` lists the others)."""

"""GPUHealthPolicy: which nodes Pitcrew manages and how careful it must be.

Every field has a default that is safe on a production fleet (breaker at
10 %, one drain and one remediation at a time, burn-in only for nodes that
join later), so a policy that names only a node selector is already a good
policy. Cross-field rules live in CEL next to the fields they bind, so
``kubectl apply`` answers a mistake with a sentence rather than the operator
discovering it at 3 a.m.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from enum import StrEnum
from typing import ClassVar

from pydantic import ConfigDict, Field, field_validator

from gpuhealth.checks import PASSIVE
from gpuhealth.report import FaultClass
from gpuhealth.thresholds import DEFAULTS as THRESHOLDS
from pitcrew.api.meta import (
    ApiModel,
    Condition,
    Duration,
    IntOrPercent,
    LabelSelector,
    Resource,
    Timestamp,
    cel,
    conditions_field,
    duration_field,
    validations,
)

PERCENT_OR_COUNT_RULE = "type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')"


class RemediationAction(StrEnum):
    """One rung of a remediation ladder."""

    RESET_GPU = "reset-gpu"
    REBOOT = "reboot"
    REIMAGE = "reimage"
    CLUSTER_API = "cluster-api"
    WEBHOOK = "webhook"
    RETIRE = "retire"

    @property
    def idempotent(self) -> bool:
        """Whether starting this rung twice for one key does the work once: the reset
        Job is named by the key, the webhook carries it as Idempotency-Key, the
        Cluster API annotation's value is the key. A Redfish reboot is not: a second
        ForceRestart reboots the machine again."""
        return self in (
            RemediationAction.RESET_GPU,
            RemediationAction.CLUSTER_API,
            RemediationAction.WEBHOOK,
            RemediationAction.REIMAGE,
        )


class DrainTimeoutAction(StrEnum):
    """What to do when evictions have not finished by the drain timeout."""

    WAIT = "wait"
    ESCALATE = "escalate"
    FORCE = "force"


class ValidationSuite(StrEnum):
    QUICK = "quick"
    STANDARD = "standard"
    BURN_IN = "burn-in"


class NcclPairing(StrEnum):
    PAIRWISE = "pairwise"
    RING = "ring"


class ChecksSpec(ApiModel):
    """Passive checks run by the node agent."""

    interval: Duration = duration_field(
        "30s", "How often the agent runs passive checks.", name="checks.interval"
    )
    heartbeat: Duration = duration_field(
        "5m", "Longest time between two agent status writes.", name="checks.heartbeat"
    )
    expected_gpus: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="GPUs each node must show; default: the node's nvidia.com/gpu capacity.",
    )
    disabled: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Names of passive checks not to run: " + ", ".join(PASSIVE) + ".",
        json_schema_extra={"items": {"type": "string", "enum": list(PASSIVE)}},
    )
    thresholds: dict[str, float] = Field(
        default_factory=dict,
        description="Overrides of gpuhealth thresholds, by name (see Check thresholds).",
        json_schema_extra={
            "maxProperties": 64,
            **validations(
                cel(
                    f"self.all(name, name in {sorted(THRESHOLDS)!r})".replace("'", '"'),
                    "unknown threshold name; valid names: " + ", ".join(sorted(THRESHOLDS)),
                    reason="FieldValueInvalid",
                )
            ),
        },
    )

    @field_validator("disabled")
    @classmethod
    def _known_checks(cls, names: list[str]) -> list[str]:
        unknown = sorted(set(names) - set(PASSIVE))
        if unknown:
            raise ValueError(f"unknown check(s) {unknown}; valid names: {', '.join(PASSIVE)}")
        return names

    @field_validator("thresholds")
    @classmethod
    def _known_thresholds(cls, values: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(values) - set(THRESHOLDS))
        if unknown:
            raise ValueError(
                f"unknown threshold(s) {unknown}; valid names: {', '.join(sorted(THRESHOLDS))}"
            )
        return values


MIN_VERIFICATION_INTERVAL = Duration("5m")
VERIFICATION_PERCENT_OR_COUNT_RULE = (
    "type(self) == int ? self >= 1 : self.matches('^(100|[1-9][0-9]?)%$')"
)


class PeriodicVerificationSpec(ApiModel):
    """Verification of idle nodes in service, without taking them out of service.

    A node with no workload pods gets a probe Job that requests all its GPUs at
    the probe PriorityClass and no cordon: any workload that wants the node
    preempts the probe, and a preempted verification is no verdict. A failing
    one takes the node out like any failing check."""

    enabled: bool = Field(default=False, description="Verify idle nodes periodically.")
    interval: Duration = Field(
        default=Duration("1h"),
        description="Time from one verification of a node to its next (at least 5m; "
        "hourly is the recommended cadence).",
        json_schema_extra=validations(
            cel(
                f"duration(self) >= duration('{MIN_VERIFICATION_INTERVAL}')",
                f"validation.periodic.interval must be at least {MIN_VERIFICATION_INTERVAL}: "
                "a shorter cadence would keep idle GPUs busy with probes",
            )
        ),
    )
    max_concurrent: IntOrPercent = Field(
        default="5%",
        description="Most nodes of the pool verified at once (count or percent of the "
        "pool's nodes; at least one node).",
        json_schema_extra=validations(
            cel(
                VERIFICATION_PERCENT_OR_COUNT_RULE,
                "validation.periodic.maxConcurrent must be at least 1 node or a percentage "
                "from 1% to 100%",
            )
        ),
    )
    suite: ValidationSuite = Field(
        default=ValidationSuite.QUICK,
        description="Probe suite of a verification (quick: GEMM and HBM on every GPU).",
    )

    @field_validator("interval")
    @classmethod
    def _long_enough(cls, value: Duration) -> Duration:
        if value < MIN_VERIFICATION_INTERVAL:
            raise ValueError(f"interval must be at least {MIN_VERIFICATION_INTERVAL}")
        return value


class ValidationSpec(ApiModel):
    """Active validation (probe Jobs that need the node's GPUs to themselves)."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!self.periodic.enabled || self.priorityClassName != ''",
                "validation.periodic needs validation.priorityClassName: its probes run "
                "beside the workload without a cordon, so they must run at a PriorityClass "
                "every workload preempts (the chart creates pitcrew-probe)",
            ),
        )
    )

    burn_in_on_join: bool = Field(default=True, description="Burn in nodes that join later.")
    burn_in_after_repair: bool = True
    suite: ValidationSuite = ValidationSuite.STANDARD
    timeout: Duration = duration_field(
        "30m", "Longest a probe Job may run.", name="validation.timeout"
    )
    priority_class_name: str = Field(
        default="", max_length=253, description="PriorityClass of probe pods (low, preemptible)."
    )
    periodic: PeriodicVerificationSpec = Field(default_factory=PeriodicVerificationSpec)


class RemediationStep(ApiModel):
    action: RemediationAction
    timeout: Duration = duration_field(
        "15m", "How long one attempt may take.", name="remediation step timeout"
    )
    attempts: int = Field(default=1, ge=1, le=10)


RUNG_TIMEOUT_FALLBACK: datetime.timedelta = RemediationStep.model_fields["timeout"].default
"""A remediation step's default timeout, which a rung no longer on its ladder gets."""

LADDER_RULES = validations(
    cel(
        "!self.exists(s, s.action == 'retire') || self[size(self) - 1].action == 'retire'",
        "retire ends a ladder: no step can follow it",
    ),
)


def _default_ladder() -> list[RemediationStep]:
    return [
        RemediationStep(action=RemediationAction.RESET_GPU, timeout="10m", attempts=2),
        RemediationStep(action=RemediationAction.REBOOT, timeout="30m"),
        RemediationStep(action=RemediationAction.RETIRE),
    ]


class Ladders(ApiModel):
    """Remediation ladder per fault class, climbed one rung per failed attempt.

    Application and watch faults have no ladder: they never act alone; one that
    persists for an hour escalates to ``degraded`` and takes that ladder."""

    fatal: list[RemediationStep] = Field(
        default_factory=_default_ladder, max_length=8, json_schema_extra=LADDER_RULES
    )
    degraded: list[RemediationStep] = Field(
        default_factory=_default_ladder, max_length=8, json_schema_extra=LADDER_RULES
    )

    def for_class(self, fault_class: FaultClass) -> list[RemediationStep]:
        return {FaultClass.FATAL: self.fatal, FaultClass.DEGRADED: self.degraded}.get(
            fault_class, []
        )

    def rung(self, fault_class: FaultClass, step: int) -> RemediationStep | None:
        """Rung ``step`` of the class's ladder; None when the ladder (edited since the
        rung started) is shorter."""
        ladder = self.for_class(fault_class)
        return ladder[step] if step < len(ladder) else None

    def rung_timeout(self, fault_class: FaultClass, step: int) -> datetime.timedelta:
        """How long rung ``step`` may take. A rung the ladder no longer has (the policy
        was edited while it ran) gets a step's default timeout: the repair was started
        for real and is given the time any step is, not escalated at once."""
        rung = self.rung(fault_class, step)
        return rung.timeout if rung is not None else RUNG_TIMEOUT_FALLBACK


class LemonSpec(ApiModel):
    max_remediations: int = Field(
        default=3, ge=1, le=100, description="Remediations within the window that make a lemon."
    )
    window: Duration = duration_field(
        "168h", "Window over which remediations are counted.", name="lemon.window"
    )


class SecretReference(ApiModel):
    """A Secret in the operator's own namespace: the only one whose Secrets it may read
    (a namespace field would accept names the operator can never read, and widening
    its RBAC to every namespace's Secrets is not worth a reboot)."""

    name: str = Field(min_length=1, max_length=253)


HOST_PATTERN = r"^([*][.])?[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
ALLOWED_ENDPOINT_RULE = f"self.all(e, isCIDR(e) || e.matches('{HOST_PATTERN}'))"


class BmcAnnotationsSpec(ApiModel):
    """Whether a Node's own annotations may name its BMC.

    Off by default: a kubelet may annotate its own Node, so whoever has root on a
    GPU node could point the annotations at a server of theirs and receive the
    fleet's BMC credentials with the next reboot. Opted in, an annotated endpoint
    is used only if its host is in ``allowedEndpoints``."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!self.enabled || size(self.allowedEndpoints) > 0",
                "nodeAnnotations.enabled needs allowedEndpoints: the CIDRs or host names "
                "a node's annotation may name as its BMC",
            ),
        )
    )

    enabled: bool = Field(
        default=False,
        description="Read pitcrew.dev/bmc-endpoint and pitcrew.dev/bmc-system from the Node "
        "for nodes not in the inventory.",
    )
    allowed_endpoints: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="CIDRs (`10.20.0.0/16`) and host names (`bmc-7.example.com`, or "
        "`*.bmc.example.com` for any name under it) an annotated endpoint may have.",
        json_schema_extra={
            "items": {"type": "string", "maxLength": 253},
            **validations(
                cel(
                    ALLOWED_ENDPOINT_RULE,
                    "allowedEndpoints takes CIDRs like 10.20.0.0/16 and lower-case host "
                    "names like bmc-7.example.com or *.bmc.example.com",
                )
            ),
        },
    )

    @field_validator("allowed_endpoints")
    @classmethod
    def _endpoints(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                if not re.fullmatch(HOST_PATTERN, entry):
                    raise ValueError(
                        f"allowedEndpoints entry {entry!r} is neither a CIDR nor a lower-case "
                        "host name (bmc-7.example.com, *.bmc.example.com)"
                    ) from None
        return entries


class Metal3Spec(ApiModel):
    """BMC addresses from Metal3's BareMetalHosts, which the cluster admin owns."""

    enabled: bool = Field(
        default=False,
        description="Read a node's BMC from the BareMetalHost (metal3.io/v1alpha1) in "
        "`namespace` named like the node, or labelled pitcrew.dev/node=<node>: its "
        "spec.bmc.address (a Redfish form) and the Secret spec.bmc.credentialsName names. "
        "Needs the chart's rbac.metal3Namespace.",
    )
    namespace: str = Field(
        default="metal3",
        min_length=1,
        max_length=63,
        description="Namespace of the BareMetalHosts and their credential Secrets.",
    )


class RedfishSpec(ApiModel):
    credentials_secret: SecretReference | None = Field(
        default=None,
        description="Secret in the operator's namespace with `username` and `password` "
        "for the BMCs.",
    )
    inventory_secret: SecretReference | None = Field(
        default=None,
        description="Secret in the operator's namespace that the cluster admin owns: one "
        "key per node name, each a JSON object with `endpoint` (https://10.1.2.3), "
        "`system` (/redfish/v1/Systems/1) and optionally `username` and `password` for "
        "that BMC. The trusted source of BMC addresses.",
    )
    metal3: Metal3Spec = Field(default_factory=Metal3Spec)
    node_annotations: BmcAnnotationsSpec = Field(default_factory=BmcAnnotationsSpec)
    verify_tls: bool = True


class WebhookSpec(ApiModel):
    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.url.startsWith('https://') || self.url.startsWith('http://')",
                "webhook url must start with http:// or https://",
            ),
        )
    )

    url: str = Field(min_length=8, max_length=2048)
    timeout: Duration = duration_field("10s", "Timeout of one request.", name="webhook.timeout")


class RemediationSpec(ApiModel):
    ladders: Ladders = Field(default_factory=Ladders)
    lemon: LemonSpec = Field(default_factory=LemonSpec)
    redfish: RedfishSpec = Field(default_factory=RedfishSpec)
    webhook: WebhookSpec | None = None


class DrainSpec(ApiModel):
    timeout: Duration = duration_field(
        "30m", "Longest wait for evictions to finish.", name="drain.timeout"
    )
    on_timeout: DrainTimeoutAction = DrainTimeoutAction.ESCALATE
    checkpoint_max_delay: Duration = duration_field(
        "2h",
        "Longest a Suspect node waits for its job's next checkpoint before draining.",
        name="drain.checkpointMaxDelay",
    )
    max_parallel_evictions: int = Field(default=16, ge=1, le=256)


class SafetySpec(ApiModel):
    """Bounds on what Pitcrew may do to the fleet at once."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!(has(self.maxUnhealthy) && has(self.minHealthy))",
                "set either maxUnhealthy or minHealthy, not both",
            ),
        )
    )

    max_unhealthy: IntOrPercent | None = Field(
        default=None,
        description="Most nodes out of service at once (count or percent); beyond it the "
        "circuit breaker opens and no new node is quarantined. Default 10%.",
        json_schema_extra=validations(
            cel(
                PERCENT_OR_COUNT_RULE,
                "maxUnhealthy must be a non-negative number of nodes or a percentage like '10%'",
            )
        ),
    )
    min_healthy: IntOrPercent | None = Field(
        default=None,
        description="Alternative to maxUnhealthy: fewest nodes that stay in service.",
        json_schema_extra=validations(
            cel(
                PERCENT_OR_COUNT_RULE,
                "minHealthy must be a non-negative number of nodes or a percentage like '90%'",
            )
        ),
    )
    max_concurrent_drains: int = Field(default=1, ge=1, le=1000)
    max_concurrent_remediations: int = Field(default=1, ge=1, le=1000)
    storm_cooldown: Duration = duration_field(
        "10m",
        "After the breaker closes, time before quarantines resume.",
        name="safety.stormCooldown",
    )
    drain: DrainSpec = Field(default_factory=DrainSpec)
    dry_run: bool = Field(
        default=False, description="Decide and record, but write nothing to Nodes or Pods."
    )
    paused: bool = Field(default=False, description="Decide nothing for this policy's nodes.")


class SparesSpec(ApiModel):
    count: int = Field(
        default=0,
        ge=0,
        le=1000,
        description="Validated nodes held back for the training job that loses a node: "
        "when a node running a job is taken out, a spare is reserved for that job and its "
        "replacement pod lands there (a node with no training job releases one to any work).",
    )
    reservation_timeout: Duration = duration_field(
        "5m",
        "How long a spare reserved for a job waits for the job's pod once a pod of the job "
        "waits for a node (before that, at most drain.checkpointMaxDelay plus drain.timeout "
        "more: the job's node drains it by then). Unclaimed, the spare goes back to the pool: "
        "a spare again if the pool is short of spares, else capacity for any pod.",
        name="spares.reservationTimeout",
    )
    keep_for_displaced: int = Field(
        default=1,
        ge=0,
        le=1000,
        description="Spares never lent to a training job's pod that waits for capacity: "
        "kept for the job that loses a node next. The other spares serve such a pod (one "
        "of a discovered training job, that asks for GPUs and fits the spare) when no "
        "displaced job needs them: reserved for its job as for a job that lost a node.",
    )
    pre_pull_images: bool = Field(
        default=True,
        description="Pull onto each idle spare the container images of the largest running "
        "training job of its pool, so the job's replacement pod that lands there starts "
        "without pulling them (a training image is tens of GB): one short pod per spare in the "
        "job's namespace, as the job's ServiceAccount with its pull secrets, at "
        "validation.priorityClassName when set, no GPU, deleted once the spare holds them. "
        "GPUNode status.images lists the job's images the node's kubelet reports it holds.",
    )


class GoodputSpec(ApiModel):
    target: float = Field(
        default=0.96,
        gt=0,
        le=1,
        description="Fleet goodput the pool should keep: exported as "
        "pitcrew_goodput_target_ratio{pool}, which the shipped alert compares goodput to.",
    )
    windows: list[Duration] = Field(
        # Written as text, so the schema's default reads "1h", not a serialized timedelta;
        # validate_default makes them Durations in the model like any other value.
        default_factory=lambda: ["1h", "24h"],
        validate_default=True,
        min_length=1,
        max_length=8,
        description="Windows the policy status reports fleet goodput over (the first is the "
        "Goodput printer column).",
        json_schema_extra=validations(
            cel(
                "self.all(w, duration(w) >= duration('1m') && duration(w) <= duration('24h'))",
                "each goodput window must be between 1m and 24h: the operator keeps one day "
                "of per-minute history",
            )
        ),
    )


MIN_SLOWER_PERCENT = 5
"""The least slowdown a policy may judge: under it, step-to-step noise. The hooks also
learn a rank's usual pace only from gatherings at most this much slower than it
(:mod:`pitcrew.client.ranks`), so a straggler never becomes its own usual."""


class StragglerSpec(ApiModel):
    """When a node that slows its job down is taken out (reason ``Straggler``).

    A synchronous job runs at the pace of its slowest rank: a throttled GPU or a
    degraded link costs the MFU of every GPU in the job while each health check
    passes. Ranks are not alike (a pipeline's stages, MoE experts), so the framework
    hooks judge each rank against its own usual pace: its compute relative to the
    job's median (or its role's), learned over the job's first gatherings. Rank 0's
    progress report names the nodes furthest behind their usual pace; a node named
    slower than its usual by ``slowerThanMedianPercent`` in ``consecutiveReports``
    reports in a row is made Suspect and drained at the job's next checkpoint like
    any degraded fault."""

    enabled: bool = Field(default=True, description="Take out nodes that straggle.")
    slower_than_median_percent: int = Field(
        default=20,
        ge=MIN_SLOWER_PERCENT,
        le=1000,
        description="How much slower than its usual pace a node's rank must be to count "
        "as the job's straggler in one report: the usual pace is the rank's own step "
        "time relative to the job's median (its role's, where the job names roles), as "
        "the hooks learned it; a report that names no usual pace is judged against the "
        "job's median.",
    )
    consecutive_reports: int = Field(
        default=3,
        ge=2,
        le=100,
        description="Reports in a row a node must be the straggler before it is taken "
        "out: one slow step is noise, so at least 2.",
    )


class HangSpec(ApiModel):
    """When a training job whose pods run but whose ranks stopped stepping is hung.

    A rank that stops (a GPU that stops answering, a NIC that drops, a deadlock) holds
    every other rank in its next collective until the NCCL watchdog ends the job, ten
    minutes by default, all of the job's GPUs idle. Each pod's heartbeat
    (``pitcrew.dev/heartbeat``, written by the framework hooks) says its last step and
    when: no rank stepped for ``stepTimeMultiple`` times the job's recent step time
    (and at least ``minStall``), outside a pause the job announced (a checkpoint being
    written, an evaluation) of at most ``maxPause``, is a hang. The node of the rank
    that stopped first (else the job's nodes with a failing check, else its known
    stragglers) is quarantined with reason ``Hang``, and the job's pods are deleted so
    its launcher starts them again."""

    enabled: bool = Field(default=True, description="Detect hung training jobs and act on them.")
    step_time_multiple: float = Field(
        default=10.0,
        ge=2,
        le=1000,
        description="No rank stepped for this many times the job's recent step time: hung.",
    )
    min_stall: Duration = duration_field(
        "60s",
        "The shortest stall that is a hang, whatever the step time: longer than the "
        "hooks' write interval (30 s), so a heartbeat not yet written is no hang.",
        name="hangs.minStall",
    )
    max_pause: Duration = duration_field(
        "30m",
        "The longest pause a job announces (a checkpoint being written, an evaluation) "
        "that is not counted as a stall; a job paused longer is hung.",
        name="hangs.maxPause",
    )


class SlurmSpec(ApiModel):
    """Nodes whose GPUs Slurm schedules: slurmd in a pod on each node (Slinky's NodeSet,
    SUNK) or on the host. Cordoning the Kubernetes node does not stop Slurm starting
    jobs there, and evicting the slurmd pod kills its jobs without Slurm knowing why,
    so Pitcrew drains the Slurm node first (reason ``pitcrew: <reason>``), waits for
    its jobs as a drain waits for pods, and resumes only a drain it made."""

    enabled: bool = Field(
        default=False,
        description="Drain and resume this policy's nodes in Slurm too. Needs the "
        "operator's Slurm client (its --slurm-scontrol flag, which the chart's "
        "slurm.enabled sets): without it, every node of the policy is a Slurm node of "
        "unknown state (condition SlurmReadable False), whose drain waits until "
        "drain.timeout.",
    )
    namespace: str = Field(
        default="slurm",
        min_length=1,
        max_length=63,
        description="Namespace of the slurmd pods. Only pods there name a Slurm node: a "
        "tenant's pod with the same label elsewhere names nothing.",
    )
    node_name_label: str = Field(
        default="slinky.slurm.net/pod-hostname",
        min_length=1,
        max_length=316,
        description="Label of a slurmd pod whose value is its Slurm node name (Slinky's "
        "NodeSet pods carry this one). A node with no such pod is the Slurm node of "
        "its own Kubernetes name. A name Slurm does not list stands for the one Slurm "
        "node that is its short form (the part before the first dot: Slurm's default "
        "NodeName is the short host name), or whose short form it is.",
    )
    down_grace: Duration = duration_field(
        "5m",
        "Under drain.onTimeout force: how long after the drain timeout (when the Slurm "
        "node is set DOWN) Slurm may still show jobs on it (a job stuck COMPLETING) or "
        "be unreadable before the remediation starts anyway.",
        name="slurm.downGrace",
    )


class GPUHealthPolicySpec(ApiModel):
    node_selector: LabelSelector = Field(description="Nodes this policy manages; must not overlap.")
    checks: ChecksSpec = Field(default_factory=ChecksSpec)
    validation: ValidationSpec = Field(default_factory=ValidationSpec)
    remediation: RemediationSpec = Field(default_factory=RemediationSpec)
    safety: SafetySpec = Field(default_factory=SafetySpec)
    spares: SparesSpec = Field(default_factory=SparesSpec)
    goodput: GoodputSpec = Field(default_factory=GoodputSpec)
    stragglers: StragglerSpec = Field(default_factory=StragglerSpec)
    hangs: HangSpec = Field(default_factory=HangSpec)
    slurm: SlurmSpec = Field(default_factory=SlurmSpec)


class BreakerStatus(ApiModel):
    open: bool = False
    since: Timestamp | None = None
    message: str = Field(default="", max_length=1024)


class WindowGoodput(ApiModel):
    window: str = Field(max_length=32)
    ratio: float | None = Field(
        default=None, ge=0, le=1, description="Null until the window holds any GPU time."
    )


class GoodputStatus(ApiModel):
    """Share of the pool's GPU time on nodes in service (Healthy or Spare), per window
    of ``spec.goodput.windows``, beside the target it is held to."""

    target: float | None = Field(default=None, gt=0, le=1)
    windows: list[WindowGoodput] = Field(default_factory=list, max_length=8)


class GPUHealthPolicyStatus(ApiModel):
    observed_generation: int = 0
    nodes: int = 0
    unhealthy: int = 0
    phases: dict[str, int] = Field(default_factory=dict)
    breaker: BreakerStatus = Field(default_factory=BreakerStatus)
    goodput: GoodputStatus = Field(default_factory=GoodputStatus)
    cooldown_until: Timestamp | None = Field(
        default=None, description="Quarantines resume after this time (storm cooldown)."
    )
    conditions: list[Condition] = conditions_field()


class GPUHealthPolicy(Resource):
    """Cluster-scoped policy: node selection, checks, validation, remediation, safety."""

    KIND: ClassVar[str] = "GPUHealthPolicy"
    PLURAL: ClassVar[str] = "gpuhealthpolicies"
    SHORT_NAMES: ClassVar[list[str]] = ["ghp"]
    PRINTER_COLUMNS: ClassVar[list[dict[str, str | int]]] = [
        {"name": "Nodes", "type": "integer", "jsonPath": ".status.nodes"},
        {"name": "Unhealthy", "type": "integer", "jsonPath": ".status.unhealthy"},
        {"name": "Breaker", "type": "boolean", "jsonPath": ".status.breaker.open"},
        {"name": "Goodput", "type": "number", "jsonPath": ".status.goodput.windows[0].ratio"},
        {"name": "DryRun", "type": "boolean", "jsonPath": ".spec.safety.dryRun"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]

    spec: GPUHealthPolicySpec
    status: GPUHealthPolicyStatus = Field(default_factory=GPUHealthPolicyStatus)

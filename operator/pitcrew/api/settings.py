"""The operator process's settings, grouped by concern, every default written once.

Policy decisions live in GPUHealthPolicy; these say how the process runs. Like kopf's
``OperatorSettings`` they are grouped by what they are about "instead of a flat
mega-object": ``leader`` (election), ``rounds`` (the reconcile loop), ``jobs`` (the
probe and remediation Jobs the operator creates), ``metrics``, ``health`` and
``slurm``; the three that concern everything (``kubeconfig``, ``namespace``,
``dryRun``) sit at the top. Each field's docstring is its documentation and its
default is written here only: the ``pitcrew operator`` flags
(:mod:`pitcrew.cli.flags`), the chart's ``operator.settings`` values, their schema and
the Deployment's arguments (:mod:`pitcrew.deploy.chart_settings`), and the reference
in docs/configuration.md (:mod:`pitcrew.api.docgen`) are generated from the fields
that :func:`settings_fields` walks, and ``pitcrew chart --check`` and
``pitcrew crds --check`` fail when one of them no longer matches.

Flag names. A field's flag is ``--<group>-<field>`` with dashes for underscores
(``rounds.workers`` is ``--rounds-workers``), or ``--<field>`` at the top
(``--dry-run``); a boolean also gets its ``--no-`` form. Where a flag predates the
groups, the field keeps its name with :class:`Flag` (``--probe-image``,
``--max-jobs``), so scripts and the README keep working. Three flags took plain
seconds and are durations now, under generated names; their old names stay as
aliases (``--lease-seconds``, ``--resync-seconds``, ``--slurm-seconds``), and a bare
number given to any duration flag is read as seconds.

Durations are :class:`~pitcrew.api.meta.Duration`: written ``15s`` or ``1h30m`` in
flags and chart values, a ``timedelta`` in the code.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

from pitcrew.api.meta import Duration
from pitcrew.api.vocabulary import DEFAULT_NAMESPACE


@dataclass(frozen=True)
class Flag:
    """The command-line name of a field whose flag predates the generated names, and
    older names that still work (:mod:`pitcrew.cli.flags`)."""

    name: str | None = None
    aliases: tuple[str, ...] = ()


def at_least(minimum: str) -> AfterValidator:
    """A duration no shorter than ``minimum``."""
    floor = Duration(minimum)

    def check(value: Duration) -> Duration:
        if value < floor:
            raise ValueError(f"must be at least {floor}, not {value}")
        return value

    return AfterValidator(check)


def _positive(value: Duration) -> Duration:
    if not value:
        raise ValueError("must be longer than 0s")
    return value


PositiveDuration = Annotated[Duration, AfterValidator(_positive)]


class SettingsGroup(BaseModel):
    """Base of the settings and their groups: camelCase in chart values, each field's
    docstring its description, unknown fields refused, frozen once built."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
    )


class LeaderSettings(SettingsGroup):
    """Leader election by shard (:mod:`pitcrew.controller.leader`): a Lease per pool
    and one for the cluster-wide work; the replicas split them."""

    election: bool = True
    """Act for a pool (and for the cluster-wide work) only while holding its Lease, and
    stop at once when it is lost. Off, the process acts for all at once: run one replica
    only."""
    lease_name: str = "pitcrew-operator"
    """Name of the cluster shard's Lease, in the operator's namespace; each pool's Lease
    is named after it (``<name>-pool-<policy>``), and each replica's member Lease
    (``<name>-member-<identity>``)."""
    identity: Annotated[str, Flag("--identity")] = ""
    """Holder identity in the Lease; empty: the host name (in a pod, the pod's name)."""
    lease_duration: Annotated[Duration, at_least("3s"), Flag(aliases=("--lease-seconds",))] = (
        Duration("15s")
    )
    """How long a Lease holds without renewal: another replica takes a dead one's shards
    over this long after it died (whole seconds, at least 3s)."""


class RoundSettings(SettingsGroup):
    """The reconcile loop: rounds over the nodes whose state changed."""

    resync: Annotated[PositiveDuration, Flag(aliases=("--resync-seconds",))] = Duration("15s")
    """A node in motion (draining, remediating, validating, waiting) is re-decided at least
    this often; a node at rest at its earliest deadline (design 008)."""
    workers: int = Field(default=32, ge=1, le=512)
    """Threads executing actions against the API in parallel."""


class JobSettings(SettingsGroup):
    """The probe, pair and reset Jobs the operator creates in its namespace."""

    probe_image: Annotated[str, Flag("--probe-image")] = "ghcr.io/pitcrew-dev/pitcrew-probe:0.1.0"
    """Image of the probe and pair Jobs (``docker build --target probe``)."""
    probe_resources: Annotated[dict[str, dict[str, str]], Flag("--probe-resources")] = Field(
        default_factory=dict
    )
    """CPU and memory ``requests``/``limits`` of probe pods, as JSON
    (``{"requests": {"cpu": "4"}}``); their GPUs are always the node's whole
    ``nvidia.com/gpu`` capacity."""
    image_pull_secrets: Annotated[tuple[str, ...], Flag("--image-pull-secrets")] = ()
    """Secrets the probe, pair and reset Jobs pull their images with (comma-separated)."""
    runtime_class: Annotated[str, Flag("--job-runtime-class")] = ""
    """RuntimeClass of the probe, pair and reset Jobs (GPU pods: often ``nvidia``);
    empty: the node's default runtime."""
    remediation_image: Annotated[str, Flag("--remediation-image")] = (
        "nvcr.io/nvidia/cuda:12.6.2-base-ubuntu24.04"
    )
    """Image with ``nvidia-smi`` for the reset-gpu Job."""
    account_prefix: Annotated[str, Flag("--account-prefix")] = "pitcrew"
    """Prefix of the ServiceAccounts the Jobs run as (``<prefix>-probe``,
    ``<prefix>-remediation``): the chart's full name."""


class MetricsSettings(SettingsGroup):
    """Prometheus metrics (docs/metrics.md)."""

    port: int = Field(default=8080, ge=0, le=65535)
    """Port of ``/metrics``; 0 disables."""
    accounting_interval: PositiveDuration = Duration("5s")
    """How often GPU time and job time are added up from the cache."""
    max_jobs: Annotated[int, Flag("--max-jobs")] = Field(default=200, ge=1, le=100_000)
    """Training jobs with ``pitcrew_job_*`` series of their own (the largest by GPUs);
    the rest are summed as ``training_job="other"``, so pod labels cannot grow the metrics."""


class HealthSettings(SettingsGroup):
    """The liveness and readiness endpoints (:mod:`pitcrew.controller.health`)."""

    port: int = Field(default=8081, ge=0, le=65535)
    """Port of ``/healthz`` and ``/readyz``, which fail when the reconcile loop is stuck
    or the watches froze; 0 disables."""
    watch_stale: PositiveDuration = Duration("15m")
    """No GPUNode event for this long while agents run means a frozen watch (agents
    heartbeat every 5 minutes by default)."""


class SlurmSettings(SettingsGroup):
    """Slurm's client, for policies with ``spec.slurm`` (design 006)."""

    scontrol: str = ""
    """Path of Slurm's ``scontrol`` (``squeue`` beside it): set, the operator reads
    Slurm's nodes and drains and resumes those of policies with ``spec.slurm``. Slurm's
    configuration comes from the environment (``SLURM_CONF``)."""
    interval: Annotated[PositiveDuration, Flag(aliases=("--slurm-seconds",))] = Duration("10s")
    """How often Slurm's nodes are read (one ``scontrol`` call for all)."""


class OperatorSettings(SettingsGroup):
    """How the operator process runs. Policy decisions live in GPUHealthPolicy."""

    kubeconfig: str | None = None
    """Path to a kubeconfig; default ``$KUBECONFIG``, else the pod's service account."""
    namespace: str = DEFAULT_NAMESPACE
    """Namespace of the Lease, the probe Jobs and the remediation Jobs."""
    dry_run: bool = False
    """Global dry run: decide and record (Events, GPUNode status), never write to Nodes,
    Pods or Jobs, and call no remediator. Policies can also set it."""
    leader: LeaderSettings = LeaderSettings()
    """Leader election."""
    rounds: RoundSettings = RoundSettings()
    """The reconcile loop."""
    jobs: JobSettings = JobSettings()
    """The probe, pair and reset Jobs."""
    metrics: MetricsSettings = MetricsSettings()
    """Prometheus metrics."""
    health: HealthSettings = HealthSettings()
    """Liveness and readiness."""
    slurm: SlurmSettings = SlurmSettings()
    """Slurm's client."""

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> OperatorSettings:
        """Settings from values keyed by their dotted field path (``rounds.resync``), as
        :func:`settings_fields` names them; the rest keep their defaults."""
        nested: dict[str, Any] = {}
        for key, value in values.items():
            *groups, name = key.split(".")
            level = nested
            for group in groups:
                level = level.setdefault(group, {})
            level[name] = value
        return cls.model_validate(nested)


@dataclass(frozen=True)
class Setting:
    """One leaf field of the settings, as the generators see it."""

    path: tuple[str, ...]
    """Field names from the top (``("rounds", "resync")``)."""
    info: FieldInfo

    @property
    def key(self) -> str:
        """The dotted field path, ``rounds.resync``."""
        return ".".join(self.path)

    @property
    def value_path(self) -> str:
        """The dotted camelCase path, ``leader.leaseDuration``: the chart's value under
        ``operator.settings``."""
        return ".".join(to_camel(name) for name in self.path)

    @property
    def flag(self) -> str:
        named = self._flag.name
        return named or "--" + "-".join(self.path).replace("_", "-")

    @property
    def aliases(self) -> tuple[str, ...]:
        return self._flag.aliases

    @property
    def _flag(self) -> Flag:
        return next((m for m in self.info.metadata if isinstance(m, Flag)), Flag())

    @property
    def kind(self) -> type:
        """The field's type without ``None``: ``bool``, ``int``, ``str``, ``Duration``,
        ``tuple`` (a list of strings) or ``dict`` (an object)."""
        annotation = self.info.annotation
        if isinstance(annotation, types.UnionType):
            (annotation,) = (a for a in typing.get_args(annotation) if a is not type(None))
        origin = typing.get_origin(annotation)
        kind = origin or annotation
        assert isinstance(kind, type), f"{self.key}: unexpected type {annotation!r}"
        return kind

    @property
    def optional(self) -> bool:
        return isinstance(self.info.annotation, types.UnionType)

    @property
    def default(self) -> Any:
        return self.info.get_default(call_default_factory=True)

    @property
    def default_text(self) -> str:
        """The default as a flag would spell it (``15s``, ``true``, ``a,b``), ``""`` for
        an empty string, ``none`` for no value."""
        value = self.default
        if isinstance(value, bool):
            return str(value).lower()
        if value is None or value in ((), {}):
            return "none"
        if value == "":
            return '""'
        if isinstance(value, tuple):
            return ",".join(value)
        return str(value)

    @property
    def description(self) -> str:
        """The field's docstring on one line."""
        return " ".join((self.info.description or "").split())


def _walk(model: type[BaseModel], prefix: tuple[str, ...]) -> Iterator[Setting]:
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _walk(annotation, (*prefix, name))
        else:
            yield Setting((*prefix, name), info)


def settings_fields(model: type[BaseModel] = OperatorSettings) -> list[Setting]:
    """Every leaf field of the settings, groups walked in the order they are declared."""
    return list(_walk(model, ()))

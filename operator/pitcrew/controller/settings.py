"""Runtime settings of the operator process (not of a policy), field by field."""

from __future__ import annotations

import socket

from pydantic import BaseModel, ConfigDict, Field

from pitcrew.kube.jobs import JobPods


class OperatorSettings(BaseModel):
    """How the operator process runs. Policy decisions live in GPUHealthPolicy."""

    model_config = ConfigDict(frozen=True)

    kubeconfig: str | None = None
    """Path to a kubeconfig; default ``$KUBECONFIG``, else the pod's service account."""
    namespace: str = "pitcrew-system"
    """Namespace of the Lease, probe Jobs and remediation Jobs."""
    account_prefix: str = "pitcrew"
    """Prefix of the ServiceAccounts the Jobs run as (``<prefix>-probe``,
    ``<prefix>-remediation``): the chart's full name."""
    dry_run: bool = False
    """Global dry run: decide and record (Events, GPUNode status), never write to
    Nodes, Pods or Jobs, and call no remediator. Policies can also set it."""
    leader_election: bool = True
    """Run only while holding the Lease; exit when it is lost."""
    lease_name: str = "pitcrew-operator"
    identity: str = Field(default_factory=socket.gethostname)
    """Holder identity in the Lease (the pod name in a Deployment)."""
    lease_seconds: int = Field(default=15, ge=3)
    """Lease duration; a standby takes over this long after the leader dies."""
    resync_seconds: float = Field(default=15.0, gt=0)
    """Every node is re-decided at least this often (time-based transitions)."""
    workers: int = Field(default=32, ge=1, le=512)
    """Threads executing actions against the API in parallel."""
    probe_image: str = "ghcr.io/pitcrew-dev/pitcrew-probe:0.1.0"
    probe_resources: dict[str, dict[str, str]] = Field(default_factory=dict)
    """CPU and memory ``requests``/``limits`` of probe pods; their GPUs are always
    the node's whole ``nvidia.com/gpu`` capacity."""
    image_pull_secrets: tuple[str, ...] = ()
    """Secrets the probe, pair and reset Jobs pull their images with."""
    job_runtime_class: str = ""
    """RuntimeClass of the probe, pair and reset Jobs (GPU pods: often ``nvidia``)."""
    remediation_image: str = "nvcr.io/nvidia/cuda:12.6.2-base-ubuntu24.04"
    """Image with ``nvidia-smi`` for the reset-gpu Job."""
    metrics_port: int = Field(default=8080, ge=0, le=65535)
    """Prometheus metrics (``/metrics``); 0 disables."""
    health_port: int = Field(default=8081, ge=0, le=65535)
    """``/healthz`` and ``/readyz``: fail when the reconcile loop is stuck or the watches
    froze (see :mod:`pitcrew.controller.health`); 0 disables."""
    watch_stale_seconds: float = Field(default=900.0, gt=0)
    """No GPUNode event for this long while agents run means a frozen watch (agents
    heartbeat every 5 minutes by default)."""
    accounting_seconds: float = Field(default=5.0, gt=0)
    """How often GPU time and job time are added up from the cache."""
    slurm_scontrol: str = ""
    """Path of Slurm's ``scontrol`` (``squeue`` beside it): set, the operator reads
    Slurm's nodes and drains and resumes those of policies with ``spec.slurm``.
    Slurm's configuration comes from the environment (``SLURM_CONF``)."""
    slurm_seconds: float = Field(default=10.0, gt=0)
    """How often Slurm's nodes are read (one ``scontrol`` call for all)."""
    max_jobs: int = Field(default=200, ge=1, le=100_000)
    """Training jobs with ``pitcrew_job_*`` series of their own (the largest by GPUs);
    the rest are summed as ``job="other"``, so pod labels cannot grow the metrics."""

    @property
    def job_pods(self) -> JobPods:
        return JobPods(
            image_pull_secrets=self.image_pull_secrets, runtime_class=self.job_runtime_class
        )

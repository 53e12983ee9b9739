"""How many pods a training job needs, from the object that launched it.

A job's size matters to its accounting: fewer pods up than it needs is time it
waits, not time it trains. Pods do not say it (bar LeaderWorkerSet's annotation and
``pitcrew.dev/job-size``), but their launcher's object does, and the operator may
read it where the cluster admin grants it (the chart's ``rbac.readJobSizes``). The
fields below were read from each project's API types:

- JobSet (``jobset.x-k8s.io``; also what a Kubeflow Trainer TrainJob runs as, under
  the TrainJob's name): the sum over ``spec.replicatedJobs`` of ``replicas`` times
  the Job template's ``parallelism`` (1 when unset, as for a Job);
- Kubeflow training-operator jobs (``kubeflow.org``: PyTorchJob, MPIJob, TFJob,
  JAXJob, ...): the sum of ``replicas`` over the replica specs (``pytorchReplicaSpecs``
  and the like), bar MPI's ``Launcher``, which runs ``mpirun`` on a CPU;
- Volcano (``batch.volcano.sh`` Job): the sum of ``replicas`` over ``spec.tasks``;

only the parts whose pod template requests GPUs count, as only such pods are
the job's (:func:`pitcrew.core.convert.training_job`);
- a plain Job (``batch``): ``parallelism``, capped by ``completions`` (an indexed
  Job of N completions runs N pods at once when its parallelism says so).

Pure: :func:`owner` names the object to read from a pod, :func:`declared_size`
reads a size from it. The shell does the reading (:mod:`pitcrew.controller.job_sizes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pitcrew.api.vocabulary import GPU_RESOURCE
from pitcrew.core.job_discovery import JOBSET, VOLCANO, JobIdentity

KUBEFLOW_GROUP = "kubeflow.org"
KUBEFLOW_KINDS = frozenset(
    {"PyTorchJob", "MPIJob", "TFJob", "JAXJob", "XGBoostJob", "PaddleJob", "MXJob"}
)
"""Kubeflow's job kinds: each has one ``<kind>ReplicaSpecs`` map in its spec."""
MAX_SIZE = 100_000
"""A size above this is no size: an object with a typo must not claim a city of GPUs."""


@dataclass(frozen=True)
class Owner:
    """The object that says how big a job is, as an API path's parts."""

    group: str
    version: str
    plural: str
    namespace: str
    name: str

    @property
    def kind(self) -> str:
        """What RBAC calls it (``jobsets.jobset.x-k8s.io``): one permission per kind."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def path(self) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        return f"{base}/namespaces/{self.namespace}/{self.plural}/{self.name}"


def owner(
    identity: JobIdentity,
    namespace: str,
    labels: Mapping[str, str],
    references: list[dict[str, Any]],
) -> Owner | None:
    """The launcher object of a pod's job, if Pitcrew knows how to read its size."""
    if identity.launcher == "jobset":
        return Owner("jobset.x-k8s.io", "v1alpha2", "jobsets", namespace, labels[JOBSET])
    if identity.launcher == "volcano":
        return Owner("batch.volcano.sh", "v1alpha1", "jobs", namespace, labels[VOLCANO])
    controller = next((r for r in references if r.get("controller")), None)
    if controller is None:
        return None
    group, _, version = str(controller.get("apiVersion", "")).rpartition("/")
    kind, name = str(controller.get("kind", "")), str(controller.get("name", ""))
    if identity.launcher == "kubeflow" and group == KUBEFLOW_GROUP and kind in KUBEFLOW_KINDS:
        return Owner(group, version, f"{kind.lower()}s", namespace, name)
    if identity.launcher == "job" and group == "batch" and kind == "Job":
        return Owner("batch", version, "jobs", namespace, name)
    return None


def declared_size(owner: Owner, obj: Mapping[str, Any]) -> int | None:
    """The pods ``obj`` (the owner as the API returned it) asks for, or None."""
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        return None
    try:
        size = _size(owner, spec)
    except (TypeError, ValueError, AttributeError):
        return None  # a field of the wrong shape: no size, the pods seen count
    return size if size is not None and 0 < size <= MAX_SIZE else None


def _size(owner: Owner, spec: Mapping[str, Any]) -> int | None:
    if owner.plural == "jobsets":
        return sum(
            _count(job.get("replicas")) * _count(job_spec.get("parallelism"))
            for job in spec.get("replicatedJobs") or []
            if _gpus((job_spec := _at(job, "template", "spec")).get("template"))
        )
    if owner.group == "batch.volcano.sh":
        return sum(
            _count(task.get("replicas"))
            for task in spec.get("tasks") or []
            if _gpus(task.get("template"))
        )
    if owner.group == KUBEFLOW_GROUP:
        replicas = next((v for k, v in spec.items() if k.endswith("ReplicaSpecs")), None)
        if not isinstance(replicas, Mapping):
            return None
        return sum(
            _count(role.get("replicas"))
            for kind, role in replicas.items()
            if kind != "Launcher" and _gpus(role.get("template"))
        )
    if owner.group == "batch":
        parallelism = _count(spec.get("parallelism"))
        completions = spec.get("completions")
        return min(parallelism, _count(completions)) if completions is not None else parallelism
    return None


def _at(obj: Mapping[str, Any], *keys: str) -> Mapping[str, Any]:
    for key in keys:
        obj = obj.get(key) or {}
    return obj


def _gpus(template: Any) -> bool:
    """A pod template that requests GPUs: only such pods are the job's (a JobSet's
    CPU driver, a dataset loader, are no ranks to wait for)."""
    containers = _at(template or {}, "spec").get("containers") or []
    return any(
        str(_at(c, "resources", kind).get(GPU_RESOURCE, "0")) not in ("0", "")
        for c in containers
        for kind in ("limits", "requests")
    )


def _count(value: Any) -> int:
    """A replica count as the API defaults it: unset is 1."""
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{value!r} is no count")
    return value

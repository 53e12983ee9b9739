"""Which training job a pod belongs to, from the labels its launcher puts on it.

A job counts for goodput without its authors labelling anything: the launchers
people use already name the job on every pod they create. The keys below were read
from each project's source (the controller code that builds its pods):

- ``pitcrew.dev/job`` (and ``pitcrew.dev/job-size``): set by hand, wins over all;
- JobSet, and Kubeflow Trainer v2, whose TrainJob runs as a JobSet of its own name:
  ``jobset.sigs.k8s.io/jobset-name``;
- Kubeflow training-operator (PyTorchJob and the others) and MPIJob v2:
  ``training.kubeflow.org/job-name``;
- LeaderWorkerSet: a failure restarts one group, not the whole set, so a group is
  the job: ``leaderworkerset.sigs.k8s.io/name`` and ``group-index``, with the
  group's size in the ``leaderworkerset.sigs.k8s.io/size`` annotation;
- Volcano: ``volcano.sh/job-name``;
- a plain (indexed) Job: ``batch.kubernetes.io/job-name``, or the legacy
  ``job-name`` of clusters before Kubernetes 1.27.

Launchers build on one another (a JobSet's pods carry their child Job's labels, a
TrainJob's its JobSet's), so the most specific launcher is asked first. Names are
per namespace; the caller adds it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from pitcrew.api.vocabulary import JOB_LABEL, JOB_SIZE_LABEL

JOBSET = "jobset.sigs.k8s.io/jobset-name"
KUBEFLOW = "training.kubeflow.org/job-name"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
VOLCANO = "volcano.sh/job-name"
NAMED_BY = (
    ("jobset", JOBSET),
    ("kubeflow", KUBEFLOW),
    ("volcano", VOLCANO),
    ("job", "batch.kubernetes.io/job-name"),
    ("job", "job-name"),
)
"""Launchers whose job is one label's value, most specific first."""
TAINT_VALUE_MAX = 63
"""A taint's value is a label value: 63 characters at most."""
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


@dataclass(frozen=True)
class JobIdentity:
    name: str
    """The job's name in its namespace."""
    launcher: str
    size: int | None = None
    """Pods the job needs, where the pod says so."""


def identify(labels: Mapping[str, str], annotations: Mapping[str, str]) -> JobIdentity | None:
    """The job a pod belongs to, or None for a pod no launcher names."""
    if labels.get(JOB_LABEL):
        return JobIdentity(labels[JOB_LABEL], "pitcrew", _size(labels.get(JOB_SIZE_LABEL)))
    if labels.get(LWS_NAME) and labels.get(LWS_GROUP):
        name = f"{labels[LWS_NAME]}-{labels[LWS_GROUP]}"
        return JobIdentity(name, "leaderworkerset", _size(annotations.get(LWS_SIZE)))
    launcher, key = next(((n, k) for n, k in NAMED_BY if labels.get(k)), ("", ""))
    return JobIdentity(labels[key], launcher) if key else None


def _size(text: str | None) -> int | None:
    """A declared size; anything but a positive whole number is no size."""
    if text and text.isdigit() and int(text) > 0:
        return int(text)
    return None


def taint_value(namespace: str, job: str) -> str:
    """The job as a taint's value (a spare reserved for it, and the toleration its pods
    get): ``<namespace>.<name>`` (a namespace has no dot, so the two never blur), or,
    when that is too long or not a label value, a shortened form with a digest of the
    whole that stays unique to the job."""
    whole = f"{namespace}.{job}"
    if len(whole) <= TAINT_VALUE_MAX and _LABEL_VALUE.fullmatch(whole):
        return whole
    digest = hashlib.sha256(whole.encode()).hexdigest()[:12]
    head = re.sub(r"[^-A-Za-z0-9_.]", "-", whole)[: TAINT_VALUE_MAX - len(digest) - 1]
    return f"{head}-{digest}" if head[:1].isalnum() else f"j{head[1:]}-{digest}"

"""Which images to pull onto which spare, before any fault (``spares.prePullImages``).

A spare reserved for a job takes the job's replacement pod at once, but that pod
still waits for its images: a training image is tens of GB, and a node that never
ran the job holds none of it. A spare is idle by definition, so it can pull them
ahead of need, and the replacement starts as fast as on a node the job left.

Which job's images: the largest training job running in the spare's pool (most
running pods there, then its name), the job a node loss costs most and the one most
likely to lose the next node. One job only, so a spare's disk holds one image set
beside its own, and each spare holds the same, since any of them may be reserved.

What a spare holds is read from ``Node.status.images``, which its kubelet reports,
never inferred from a pre-pull pod that ended: a pod that failed after the pull
still pulled, and a kubelet's image garbage collection can drop an image later.
The kubelet lists at most ``--node-status-max-images`` (50 by default), largest
first, so a training image is among them.

Everything here is pure: the shell (:mod:`pitcrew.controller.prepull`) reads the
pods, the nodes and the pre-pull pods, and carries out what :func:`plan` returns.
"""

from __future__ import annotations

import datetime
import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pitcrew.api.vocabulary import PRE_PULL_LABEL
from pitcrew.core.convert import parse_time, training_job

DEFAULT_REGISTRY = "docker.io"
"""The registry of a reference that names none, as the container runtimes read it."""
RETRY_AFTER = datetime.timedelta(minutes=10)
"""How long a pre-pull pod that ended stays while its spare still lacks the images,
before it is deleted and a new one pulls again: a registry that refused the pull
refuses it again at once, and an image the kubelet pulled but does not list (it lists
its 50 largest) would otherwise be pulled by a new pod every pass."""
ENDED = frozenset({"Succeeded", "Failed"})


def normalized(reference: str) -> str:
    """An image reference in the form the kubelet reports it in ``Node.status.images``
    (containerd's fully qualified name): ``busybox`` is ``docker.io/library/busybox:latest``
    and ``org/app:1`` is ``docker.io/org/app:1``; a digest is kept as written."""
    name, digest = reference.split("@", 1) if "@" in reference else (reference, "")
    first, _, rest = name.partition("/")
    if not rest:
        name = f"{DEFAULT_REGISTRY}/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"{DEFAULT_REGISTRY}/{name}"
    if digest:
        return f"{name}@{digest}"
    if ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return name


def held(node: Mapping[str, Any]) -> frozenset[str]:
    """The image names a Node's kubelet reports it holds (``status.images[].names``)."""
    images = (node.get("status") or {}).get("images") or []
    return frozenset(normalized(n) for image in images for n in image.get("names") or [])


@dataclass(frozen=True)
class JobImages:
    """A training job running in a pool, and what its pods need from a node."""

    namespace: str
    job: str
    pods: int
    """Its pods running in the pool."""
    images: tuple[str, ...]
    """Every container's and init container's image, as the pods name them, sorted."""
    pull_secrets: tuple[str, ...]
    service_account: str


def running_jobs(pods: Iterable[Mapping[str, Any]]) -> list[JobImages]:
    """The training jobs of ``pods`` (a pool's pods) with pods running, largest first.
    A job's images and pull secrets are those of its first running pod by name: a
    launcher builds every pod of a job from one template."""
    counts: Counter[tuple[str, str]] = Counter()
    first: dict[tuple[str, str], Mapping[str, Any]] = {}
    for pod in pods:
        identity = training_job(dict(pod))
        if identity is None or (pod.get("status") or {}).get("phase") != "Running":
            continue
        meta = pod.get("metadata") or {}
        key = (meta.get("namespace", ""), identity.name)
        counts[key] += 1
        if key not in first or meta.get("name", "") < first[key]["metadata"].get("name", ""):
            first[key] = pod
    jobs = [_job_images(key, n, first[key]) for key, n in counts.items()]
    return sorted(jobs, key=lambda j: (-j.pods, j.namespace, j.job))


def _job_images(key: tuple[str, str], pods: int, pod: Mapping[str, Any]) -> JobImages:
    spec = pod.get("spec") or {}
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    images = sorted({c["image"] for c in containers if c.get("image")})
    secrets = sorted({s["name"] for s in spec.get("imagePullSecrets") or [] if s.get("name")})
    return JobImages(
        namespace=key[0],
        job=key[1],
        pods=pods,
        images=tuple(images),
        pull_secrets=tuple(secrets),
        service_account=spec.get("serviceAccountName") or "default",
    )


@dataclass(frozen=True)
class PrePull:
    """A pre-pull pod to run on ``node``: every image of ``job`` (those it holds already
    cost the kubelet nothing), so the pod stays the same while the pull goes on."""

    node: str
    namespace: str
    job: str
    images: tuple[str, ...]
    pull_secrets: tuple[str, ...]
    service_account: str

    @property
    def key(self) -> str:
        """Names the node and the image set: one pre-pull pod per spare per image set
        (a pod of another key on the spare is stale)."""
        digest = hashlib.sha256("\n".join((self.node, *self.images)).encode()).hexdigest()
        return digest[:10]


def holding(job: JobImages | None, images: frozenset[str]) -> list[str]:
    """Of ``job``'s images, those the node holds (``GPUNode.status.images``)."""
    if job is None:
        return []
    return [i for i in job.images if normalized(i) in images]


def plan(node: str, images: frozenset[str], job: JobImages | None) -> PrePull | None:
    """The pre-pull a spare needs: ``job``'s images it does not hold; None when it
    holds them all or the pool runs no training job."""
    if job is None:
        return None
    if all(normalized(i) in images for i in job.images):
        return None
    return PrePull(
        node=node,
        namespace=job.namespace,
        job=job.job,
        images=job.images,
        pull_secrets=job.pull_secrets,
        service_account=job.service_account,
    )


def key_of(pre_pull: Mapping[str, Any]) -> str:
    """The key (:attr:`PrePull.key`) a pre-pull pod carries in its label."""
    labels = (pre_pull.get("metadata") or {}).get("labels") or {}
    return str(labels.get(PRE_PULL_LABEL, ""))


def ended_at(pre_pull: Mapping[str, Any]) -> datetime.datetime | None:
    """When a pre-pull pod that ended did (its last container's end); None while it
    runs, or when its status says no time."""
    status = pre_pull.get("status") or {}
    if status.get("phase") not in ENDED:
        return None
    times = [
        parse_time(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for c in status.get("containerStatuses") or []
    ]
    known = [t for t in times if t is not None]
    return max(known) if known else None


def stale(pre_pull: Mapping[str, Any], *, wanted: PrePull | None, now: datetime.datetime) -> bool:
    """Whether a pre-pull pod on a spare is to be deleted: the spare wants no pull or
    another image set, or the pod ended (:data:`RETRY_AFTER` ago, where it says when;
    at once where it does not)."""
    if wanted is None or key_of(pre_pull) != wanted.key:
        return True
    if (pre_pull.get("status") or {}).get("phase") not in ENDED:
        return False
    finished = ended_at(pre_pull)
    return finished is None or now - finished >= RETRY_AFTER

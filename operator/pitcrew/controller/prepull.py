"""The pre-pull loop: each idle spare pulls its pool's largest training job's images.

Beside the round loop, every :data:`INTERVAL` on the leader: :meth:`PrePuller.snapshot`
reads the watch cache on the event loop (the spares of each policy that pre-pulls,
the training pods running in its pool, Pitcrew's pre-pull pods), and
:meth:`PrePuller.act` does the rest on a thread, since it reads each spare's Node
from the API: the watch cache drops ``status.images``, a GPU node's largest field,
and spares are few. What to pull is :mod:`pitcrew.core.prepull`'s; what a pod looks
like is :mod:`pitcrew.kube.prepull`'s.

Level-triggered and bounded: a spare has at most one pre-pull pod, named from the
spare and the image set, so a second tick or a new leader creates nothing twice. A
pod is deleted when its spare holds the images (Succeeded or Failed alike: the
node's image list is the verdict), when its spare wants another image set, when its
node is taken out of service, and :data:`pitcrew.core.prepull.RETRY_AFTER` after it
ended without the images listed (a new one pulls again then); a spare taken for a job
keeps its pod until it ends, so a pull under way still serves the job's pod that
lands there. ``GPUNode.status.images`` says which of the job's images a spare holds,
written under its own field manager so the rounds' status writes never remove it,
and cleared once the node is no longer a spare (by the process that wrote it: a new
leader leaves what its predecessor wrote until the node is a spare again).
"""

from __future__ import annotations

import datetime
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pitcrew.api.gpunode import Phase
from pitcrew.api.vocabulary import IN_SERVICE, PRE_PULL_LABEL
from pitcrew.controller.ports import EventSink, PullCluster
from pitcrew.controller.store import Store
from pitcrew.core import prepull
from pitcrew.core.port_types import Ref
from pitcrew.kube.events import node_ref
from pitcrew.kube.prepull import pod

logger = logging.getLogger(__name__)
Object = dict[str, Any]
INTERVAL = 15.0
"""Seconds between two passes: a spare idles for hours, a pull takes minutes."""


@dataclass(frozen=True)
class Spare:
    node: str
    uid: str
    job: prepull.JobImages | None
    """The pool's largest running training job."""
    priority_class: str
    shown: tuple[str, ...]
    """``status.images`` as the GPUNode holds it now."""
    pods: tuple[Object, ...]
    """Pitcrew's pre-pull pods on the node."""


@dataclass(frozen=True)
class Snapshot:
    spares: tuple[Spare, ...] = ()
    stale: tuple[Object, ...] = ()
    """Pre-pull pods on nodes that are not spares, ended or out of service."""
    cleared: tuple[str, ...] = ()
    """Nodes no longer spares whose ``status.images`` this process wrote."""


@dataclass
class PrePuller:
    store: Store
    cluster: PullCluster
    events: EventSink
    leading: Callable[[str], bool]
    """Whether this replica leads a pool (by policy name): it pre-pulls onto, cleans up
    after and clears the status of the nodes of its own pools only."""
    clock: Callable[[], datetime.datetime] = field(
        default=lambda: datetime.datetime.now(datetime.UTC)
    )
    shown: set[str] = field(default_factory=set)
    """Nodes whose ``status.images`` this process wrote non-empty."""

    def snapshot(self) -> Snapshot:
        """What the pass needs from the watch cache; on the event loop, which feeds it."""
        store = self.store
        pools: dict[str, list[str]] = defaultdict(list)
        for name in list(store.nodes):
            matched = store.policies_of(name)
            if len(matched) == 1 and self.leading(matched[0]):
                pools[matched[0]].append(name)
        led = {name for members in pools.values() for name in members}

        def ours(node: str) -> bool:  # in a pool this replica leads, or in none
            return node in led or len(store.policies_of(node)) != 1

        spares: list[Spare] = []
        taken: set[str] = set()
        for policy_name, members in sorted(pools.items()):
            policy = store.policy(policy_name)
            if policy is None or not policy.spec.spares.pre_pull_images:
                continue
            idle = [n for n in members if store.summary(n).phase is Phase.SPARE]
            if not idle:
                continue
            pods = [p for n in members for p in store.pods_on(n)]
            jobs = prepull.running_jobs(pods)
            job = jobs[0] if jobs else None
            priority = policy.spec.validation.priority_class_name
            for name in idle:
                uid = (store.nodes[name].get("metadata") or {}).get("uid", "")
                shown = tuple(store.status(name).images)
                pulls = tuple(p for p in store.pods_on(name) if _pre_pull(p))
                spares.append(Spare(name, uid, job, priority, shown, pulls))
                taken.add(name)
        stale = [
            p
            for p in list(store.pods.values())
            if _pre_pull(p) and ours(_node(p)) and _node(p) not in taken and self._stale(p)
        ]
        cleared = tuple(sorted(n for n in self.shown if ours(n) and n not in taken))
        return Snapshot(tuple(spares), tuple(stale), cleared)

    def _stale(self, pre_pull: Object) -> bool:
        if (pre_pull.get("status") or {}).get("phase") in prepull.ENDED:
            return True
        node = _node(pre_pull)
        return bool(node) and self.store.summary(node).phase not in IN_SERVICE

    def act(self, snapshot: Snapshot) -> None:
        """Carry the pass out (API calls: on a thread)."""
        for spare in snapshot.spares:
            try:
                self._spare(spare)
            except Exception:
                logger.exception("pre-pull on spare %s failed; tried again next pass", spare.node)
        for stale in snapshot.stale:
            self._delete(stale)
        for node in snapshot.cleared:
            self.cluster.apply_gpunode_images(node=node, images=[])
            self.shown.discard(node)

    def _spare(self, spare: Spare) -> None:
        node = self.cluster.read_node(spare.node)
        if node is None:
            return
        images = prepull.held(node)
        holding = prepull.holding(spare.job, images)
        wanted = prepull.plan(spare.node, images, spare.job)
        ref = node_ref(spare.node, spare.uid)
        if tuple(holding) != spare.shown:
            written = self.cluster.apply_gpunode_images(node=spare.node, images=holding)
            self.store.put("gpunode", written)
            (self.shown.add if holding else self.shown.discard)(spare.node)
            if wanted is None and spare.job is not None:
                self._event(ref, "ImagesPrePulled", f"holds the images of {_job(spare.job)}")
        kept = False
        for existing in spare.pods:
            if prepull.stale(existing, wanted=wanted, now=self.clock()):
                self._delete(existing)
            else:
                kept = True
        if wanted is None or kept or any(prepull.key_of(p) == wanted.key for p in spare.pods):
            return  # a pod of this key that ended is deleted first, then made again
        if self.cluster.create_pod(pod(wanted, priority_class=spare.priority_class)):
            assert spare.job is not None  # a plan comes from a job
            self._event(
                ref,
                "PrePullStarted",
                f"pulling {len(wanted.images)} image(s) of {_job(spare.job)}: "
                + ", ".join(wanted.images),
            )

    def _delete(self, pre_pull: Object) -> None:
        meta = pre_pull.get("metadata") or {}
        self.cluster.delete_pod(namespace=meta.get("namespace", ""), name=meta.get("name", ""))

    def _event(self, ref: Ref, reason: str, message: str) -> None:
        self.events.emit(ref, reason=reason, message=message)


def _pre_pull(candidate: Object) -> bool:
    return PRE_PULL_LABEL in ((candidate.get("metadata") or {}).get("labels") or {})


def _node(candidate: Object) -> str:
    return str((candidate.get("spec") or {}).get("nodeName") or "")


def _job(job: prepull.JobImages) -> str:
    return f"training job {job.namespace}/{job.job} ({job.pods} pods in the pool)"

"""Kubernetes Events for every action Pitcrew takes or refuses.

Events go to the ``default`` namespace for cluster-scoped objects (where
``kubectl describe node`` looks). A repeat of the same reason and message on
the same object within the aggregation window increments the existing
Event's ``count`` instead of creating a new one, like the kubelet's
recorder does, so a PDB that blocks a drain for an hour is one Event with a
count, not hundreds. Failing to post an Event is logged and never fails the
action it describes.

Events are posted from one background thread, in the order they were
emitted, and after the cordons in flight (``hold``: the executor's
:meth:`~pitcrew.controller.lanes.Lanes.wait_first`): a burst of faults must
not wait for Event writes before the next node's cordon goes out. What was
emitted meanwhile, and within :data:`BATCH_SECONDS` after, is posted as one
Event per object and reason (:func:`aggregate`), its ``count`` the number of
actions it says and its message theirs: a node taken out says its cordon and
its transition in one write, and 150 nodes failing at once cost 150 Event
writes, not 600.
"""

from __future__ import annotations

import datetime
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from pitcrew.api.vocabulary import OPERATOR_COMPONENT
from pitcrew.core.port_types import Ref

logger = logging.getLogger(__name__)
AGGREGATE_WINDOW = datetime.timedelta(minutes=10)
RECENT_LIMIT = 10_000
BATCH_SECONDS = 0.5
"""How long a batch gathers Events once the cordons in flight are out: a plan's
cordon and the rest of it are carried out a moment apart, and one Event says both."""
HOLD_MAX = 30.0
"""Seconds a batch waits, at most, for the cordons in flight."""


@dataclass(frozen=True)
class Emitted:
    ref: Ref
    reason: str
    message: str
    warning: bool
    at: datetime.datetime


@dataclass(frozen=True)
class Said:
    """One Event to write: the Events emitted with one object and reason."""

    ref: Ref
    reason: str
    message: str
    warning: bool
    count: int
    first: datetime.datetime
    at: datetime.datetime


def aggregate(batch: list[Emitted]) -> list[Said]:
    """One Event per object and reason, in the order each was first emitted: its
    messages (each once, in order), its count (all of them), a warning if any was,
    dated by the first and the last."""
    grouped: dict[tuple[Ref, str], list[Emitted]] = {}
    for item in batch:
        grouped.setdefault((item.ref, item.reason), []).append(item)
    return [
        Said(
            ref=ref,
            reason=reason,
            message="; ".join(dict.fromkeys(x.message for x in items)),
            warning=any(x.warning for x in items),
            count=len(items),
            first=items[0].at,
            at=items[-1].at,
        )
        for (ref, reason), items in grouped.items()
    ]


def node_ref(name: str, uid: str = "") -> Ref:
    return Ref("Node", name, "v1", uid)


def pod_ref(namespace: str, name: str, uid: str = "") -> Ref:
    return Ref("Pod", name, "v1", uid, namespace)


class Recorder:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        component: str = OPERATOR_COMPONENT,
        hold: Callable[[float], None] | None = None,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.component = component
        self._hold = hold
        self._recent: dict[tuple[Ref, str, str], tuple[str, int, datetime.datetime]] = {}
        self._queue: queue.Queue[Emitted] = queue.Queue()
        threading.Thread(target=self._post_forever, daemon=True, name="pitcrew-events").start()

    def emit(self, ref: Ref, *, reason: str, message: str, warning: bool = False) -> None:
        """Queue an Event; it is posted (or its count bumped) in the background."""
        now = datetime.datetime.now(datetime.UTC)
        self._queue.put(Emitted(ref, reason, message, warning, now))

    def _post_forever(self) -> None:
        while True:
            batch = self._next_batch()
            for said in aggregate(batch):
                try:
                    self._post(said)
                except Exception:  # a broken Event must never stop the ones after it
                    logger.exception(
                        "posting event %s on %s/%s failed",
                        said.reason,
                        said.ref.kind,
                        said.ref.name,
                    )

    def _next_batch(self) -> list[Emitted]:
        """The next Event, what was emitted while the cordons in flight went out, and
        what followed within :data:`BATCH_SECONDS` (the plans' other actions, which
        start once the cordons are out)."""
        batch = [self._queue.get()]
        if self._hold is not None:
            self._hold(HOLD_MAX)
        time.sleep(BATCH_SECONDS)
        while True:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                return batch

    def _post(self, said: Said) -> None:
        ref, reason, message, now = said.ref, said.reason, said.message, said.at
        key = (ref, reason, message)
        if len(self._recent) > RECENT_LIMIT:  # forget Events past their aggregation window
            self._recent = {k: v for k, v in self._recent.items() if now - v[2] < AGGREGATE_WINDOW}
        recent = self._recent.get(key)
        try:
            if recent and now - recent[2] < AGGREGATE_WINDOW:
                name, count, first = recent
                self.core.patch_namespaced_event(
                    name,
                    ref.event_namespace,
                    {"count": count + said.count, "lastTimestamp": now.isoformat()},
                    _preload_content=False,  # the answer is not read: no client models
                )
                self._recent[key] = (name, count + said.count, first)
                return
            name = f"{ref.name}.{uuid.uuid4().hex[:12]}"
            body: Any = {
                "metadata": {"name": name, "namespace": ref.event_namespace},
                "involvedObject": {
                    "kind": ref.kind,
                    "name": ref.name,
                    "namespace": ref.namespace,
                    "apiVersion": ref.api_version,
                    "uid": ref.uid or None,
                },
                "reason": reason[:128],
                "message": message[:1024],
                "type": "Warning" if said.warning else "Normal",
                "source": {"component": self.component},
                "reportingComponent": self.component,
                "firstTimestamp": said.first.isoformat(),
                "lastTimestamp": now.isoformat(),
                "count": said.count,
            }
            self.core.create_namespaced_event(ref.event_namespace, body, _preload_content=False)
            self._recent[key] = (name, said.count, now)
        except client.ApiException as error:
            logger.warning(
                "could not post event %s on %s/%s: %s", reason, ref.kind, ref.name, error.status
            )

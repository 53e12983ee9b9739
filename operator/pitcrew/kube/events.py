"""Kubernetes Events for every action Pitcrew takes or refuses.

Events go to the ``default`` namespace for cluster-scoped objects (where
``kubectl describe node`` looks). A repeat of the same reason and message on
the same object within the aggregation window increments the existing
Event's ``count`` instead of creating a new one, like the kubelet's
recorder does, so a PDB that blocks a drain for an hour is one Event with a
count, not hundreds. Failing to post an Event is logged and never fails the
action it describes.

Events are posted from one background thread, in the order they were
emitted: a burst of faults must not wait for two Event writes per node
before the next node's cordon goes out.
"""

from __future__ import annotations

import datetime
import logging
import queue
import threading
import uuid
from typing import Any

from kubernetes import client

from pitcrew.api.meta import API_VERSION
from pitcrew.api.vocabulary import OPERATOR_COMPONENT
from pitcrew.core.port_types import Ref

logger = logging.getLogger(__name__)
AGGREGATE_WINDOW = datetime.timedelta(minutes=10)
RECENT_LIMIT = 10_000


def node_ref(name: str, uid: str = "") -> Ref:
    return Ref("Node", name, "v1", uid)


def pod_ref(namespace: str, name: str, uid: str = "") -> Ref:
    return Ref("Pod", name, "v1", uid, namespace)


def gpunode_ref(name: str, uid: str = "") -> Ref:
    return Ref("GPUNode", name, API_VERSION, uid)


class Recorder:
    def __init__(self, api: client.ApiClient, *, component: str = OPERATOR_COMPONENT) -> None:
        self.core = client.CoreV1Api(api)
        self.component = component
        self._recent: dict[tuple[Ref, str, str], tuple[str, int, datetime.datetime]] = {}
        self._queue: queue.Queue[tuple[Ref, str, str, bool, datetime.datetime]] = queue.Queue()
        threading.Thread(target=self._post_forever, daemon=True, name="pitcrew-events").start()

    def emit(self, ref: Ref, *, reason: str, message: str, warning: bool = False) -> None:
        """Queue an Event; it is posted (or its count bumped) in the background."""
        self._queue.put((ref, reason, message, warning, datetime.datetime.now(datetime.UTC)))

    def _post_forever(self) -> None:
        while True:
            ref, reason, message, warning, now = self._queue.get()
            try:
                self._post(ref, reason=reason, message=message, warning=warning, now=now)
            except Exception:  # a broken Event must never stop the ones after it
                logger.exception("posting event %s on %s/%s failed", reason, ref.kind, ref.name)

    def _post(
        self, ref: Ref, *, reason: str, message: str, warning: bool, now: datetime.datetime
    ) -> None:
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
                    {"count": count + 1, "lastTimestamp": now.isoformat()},
                )
                self._recent[key] = (name, count + 1, first)
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
                "type": "Warning" if warning else "Normal",
                "source": {"component": self.component},
                "reportingComponent": self.component,
                "firstTimestamp": now.isoformat(),
                "lastTimestamp": now.isoformat(),
                "count": 1,
            }
            self.core.create_namespaced_event(ref.event_namespace, body)
            self._recent[key] = (name, 1, now)
        except client.ApiException as error:
            logger.warning(
                "could not post event %s on %s/%s: %s", reason, ref.kind, ref.name, error.status
            )

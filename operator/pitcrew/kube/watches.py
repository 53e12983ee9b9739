"""Raw JSON watches of the hot streams: Nodes, GPUNodes and Pods, without kopf.

Every agent heartbeat is a GPUNode event, every kubelet status write a Node event,
every pod start a Pod event. kopf turned each into a per-object worker task, a body
wrapper and a handler call with its keyword arguments: 27 % of the idle operator's CPU
samples at 4,000 nodes (docs/benchmarks.md). The round loop reads none of it; it keeps
its own store and decides by node. :func:`follow` lists a collection a page at a time
and hands the listing over whole, so the store can also drop what was deleted while no
watch was open; then it watches from the listing's resourceVersion and hands over each
event's object, parsed once from its JSON line. A watch the server ends (its timeout)
starts again from the last version seen, which bookmarks keep fresh; a version the
apiserver no longer has (410 Gone, or an ERROR event) is followed by a new list, a
transient failure (the apiserver too busy, a connection dropped) by a new watch from
the last version seen, any other failure by a new list after a pause. kopf keeps the
kinds whose events are rare (policies, ValidationRuns, windows, budgets).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

from pitcrew.api.errors import PitcrewError
from pitcrew.kube.client import is_transient, list_versioned

logger = logging.getLogger(__name__)
WATCH_SECONDS = 300
"""How long the apiserver keeps one watch open before it is started again."""
PAUSE_SECONDS = 2.0
"""The pause after a failed list or watch, before the next list."""
CONNECT_SECONDS = 10.0

Listed = Callable[[list[dict[str, Any]]], None]
"""Called with every object of a new listing."""
Changed = Callable[[dict[str, Any], bool], None]
"""Called with an object that changed, and whether it was deleted."""


class VersionGoneError(PitcrewError, RuntimeError):
    """The watch's resourceVersion is older than the apiserver keeps: list again
    (:func:`follow` does)."""


def follow(
    api: client.ApiClient, path: str, *, listed: Listed, changed: Changed, stop: threading.Event
) -> None:
    """List ``path`` and watch it, handing over what it finds, until ``stop``."""
    while not stop.is_set():
        try:
            items, version = list_versioned(api, path)
            listed(items)
            del items  # the listing is the store's now: not held through the watch
            watch_from(api, path, Cursor(version), changed, stop)
        except VersionGoneError:
            logger.info("watch of %s: its version is gone; listing again", path)
        except Exception as error:  # any other failure: list again after a pause
            logger.warning("watch of %s interrupted (%s); listing again", path, error)
            stop.wait(PAUSE_SECONDS)


@dataclass
class Cursor:
    """The last resourceVersion a watch saw: where the next one goes on from."""

    version: str


def watch_from(
    api: client.ApiClient, path: str, cursor: Cursor, changed: Changed, stop: threading.Event
) -> None:
    """Watch ``path`` from the cursor until ``stop``, one watch after another. A
    transient failure (an apiserver too busy to answer, a connection dropped) watches
    again from the last version seen, after a pause: a new listing is what a loaded
    apiserver can least afford, and at 4,000 GPUNodes its pages timed out one after
    another while the operator saw no event (docs/benchmarks.md). A version gone, or
    any other failure, is raised: the caller lists again."""
    while not stop.is_set():
        try:
            watch_once(api, path, cursor, changed)
        except VersionGoneError:
            raise
        except Exception as error:
            if not is_transient(error):
                raise
            logger.warning("watch of %s interrupted (%s); watching again", path, error)
            stop.wait(PAUSE_SECONDS)


def watch_once(api: client.ApiClient, path: str, cursor: Cursor, changed: Changed) -> None:
    """One watch from the cursor until the server ends it, moving the cursor to each
    version seen."""
    query = {
        "watch": "1",
        "resourceVersion": cursor.version,
        "allowWatchBookmarks": "true",
        "timeoutSeconds": str(WATCH_SECONDS),
    }
    method, url, headers, _, _ = api.param_serialize(
        "GET",
        path,
        query_params=list(query.items()),
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    answer = api.call_api(
        method, url, header_params=headers, _request_timeout=(CONNECT_SECONDS, WATCH_SECONDS + 30)
    )
    if answer.status == 410:
        raise VersionGoneError(path)
    if not 200 <= answer.status < 300:
        answer.read()
        raise client.ApiException(status=answer.status, reason=answer.reason, body=answer.data)
    try:
        for line in iter_resp_lines(answer.response):
            if line:
                cursor.version = event(line, cursor.version, changed)
    finally:
        # Closed, never handed back to the pool: a stream left mid-way would hand the
        # next request on that connection the rest of it.
        answer.response.close()


def event(line: str, version: str, changed: Changed) -> str:
    """Hand over one watch event; the version to go on from."""
    parsed = json.loads(line)
    kind, obj = parsed.get("type"), parsed.get("object") or {}
    if kind == "ERROR":
        if obj.get("code") == 410:
            raise VersionGoneError(obj.get("message", ""))
        raise client.ApiException(status=obj.get("code"), reason=obj.get("message"))
    seen = str((obj.get("metadata") or {}).get("resourceVersion") or version)
    if kind in ("ADDED", "MODIFIED", "DELETED"):
        changed(obj, kind == "DELETED")
    return seen

"""medik8s NodeMaintenances, read where that API is installed.

Pitcrew honours a NodeMaintenance as a maintenance window over its node (from its
creation until it is deleted) instead of asking people to learn a second request
object. The API is optional, and kopf cannot watch a resource the cluster does
not serve, so it is listed on a thread every ``interval`` seconds: a 404 means
"not installed" (asked again every few minutes, so installing medik8s later
needs no restart), a 403 that the chart's role lacks it (said once). A change
wakes the nodes it names.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, cast

from kubernetes import client

from pitcrew.kube.client import is_transient

logger = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "nodemaintenance.medik8s.io", "v1beta1", "nodemaintenances"
ABSENT_SECONDS = 300.0


def lister(api: client.ApiClient) -> Callable[[], dict[str, Any]]:
    """The listing of every NodeMaintenance, as the API answers it."""

    def listing() -> dict[str, Any]:
        found = client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, PLURAL)
        return cast(dict[str, Any], found)

    return listing


class NodeMaintenances:
    def __init__(
        self,
        listing: Callable[[], dict[str, Any]],
        *,
        publish: Callable[[dict[str, dict[str, Any]]], None],
        wake: Callable[[Iterable[str]], None],
        interval: float = 10.0,
    ) -> None:
        self.listing = listing
        """Lists the NodeMaintenances (:func:`lister`): one API call."""
        self.publish = publish
        self.wake = wake
        self.interval = interval
        self.seen: dict[str, dict[str, Any]] = {}
        self._said = ""

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            stop.wait(self.poll())

    def poll(self) -> float:
        """One listing; the seconds until the next."""
        try:
            listing = self.listing()
        except client.ApiException as error:
            if error.status == 404:
                self._changed({})  # uninstalled: its requests went with it
                return ABSENT_SECONDS
            if error.status == 403:
                self._say("the operator may not list NodeMaintenances (the chart's role grants it)")
                return ABSENT_SECONDS
            if not is_transient(error):
                self._say(f"listing NodeMaintenances failed: {error.status} {error.reason}")
            return self.interval
        except Exception as error:  # the poll goes on whatever one listing met
            self._say(f"listing NodeMaintenances failed: {error}")
            return self.interval
        items = {i["metadata"]["name"]: i for i in listing.get("items") or []}
        self._changed(items)
        return self.interval

    def _changed(self, items: dict[str, dict[str, Any]]) -> None:
        def node(obj: dict[str, Any] | None) -> str:
            return str(((obj or {}).get("spec") or {}).get("nodeName") or "")

        def version(obj: dict[str, Any] | None) -> Any:
            return (obj or {}).get("metadata", {}).get("resourceVersion")

        changed = {
            name
            for name in set(items) | set(self.seen)
            if version(items.get(name)) != version(self.seen.get(name))
        }
        if not changed:
            return
        nodes = {node(items.get(n)) for n in changed} | {node(self.seen.get(n)) for n in changed}
        self.seen = items
        self.publish(items)
        self.wake(n for n in nodes if n)

    def _say(self, message: str) -> None:
        if message != self._said:
            self._said = message
            logger.warning("%s", message)

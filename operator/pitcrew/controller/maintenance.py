"""medik8s NodeMaintenances, read where that API is installed.

Pitcrew honours a NodeMaintenance as a maintenance window over its node (from its
creation until it is deleted) instead of asking people to learn a second request
object. The API is optional, and kopf cannot watch a resource the cluster does
not serve, so it is listed on a thread every ``interval`` seconds. A change wakes
the nodes it names.

What a failed listing means decides what becomes of the requests already read,
since dropping one ends its window and sends its node to revalidation while people
may still be working on it:

- a 404 where the API group is not served at all: medik8s is not installed, or was
  uninstalled and its requests went with it (said once when there were some); asked
  again every few minutes, so installing it later needs no restart;
- a 404 where the group is served, but not in :data:`VERSION`: a version no longer
  served. The requests last read are **kept**, and the policies' status says so
  (condition ``MaintenanceRequests``) until a served version is read, asked again
  every ``interval`` (most likely an upgrade in progress);
- a 403 (the chart's role lacks it) or any other refusal: kept too, and said the same
  way; a transient error is only retried.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, cast

from kubernetes import client

from pitcrew.kube.client import is_transient, request

logger = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "nodemaintenance.medik8s.io", "v1beta1", "nodemaintenances"
ABSENT_SECONDS = 300.0


def lister(api: client.ApiClient) -> Callable[[], dict[str, Any]]:
    """The listing of every NodeMaintenance, as the API answers it."""

    def listing() -> dict[str, Any]:
        found = client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, PLURAL)
        return cast(dict[str, Any], found)

    return listing


def discovery(api: client.ApiClient) -> Callable[[], list[str] | None]:
    """The versions of the API group the apiserver serves; None when it serves none."""

    def versions() -> list[str] | None:
        try:
            found = request(api, "GET", f"/apis/{GROUP}")
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        return [str(v.get("version")) for v in found.get("versions") or []]

    return versions


class NodeMaintenances:
    def __init__(
        self,
        listing: Callable[[], dict[str, Any]],
        *,
        publish: Callable[[dict[str, dict[str, Any]]], None],
        wake: Callable[[Iterable[str]], None],
        served: Callable[[], list[str] | None] = lambda: None,
        report: Callable[[str], None] = lambda problem: None,
        interval: float = 10.0,
    ) -> None:
        self.listing = listing
        """Lists the NodeMaintenances (:func:`lister`): one API call."""
        self.publish = publish
        self.wake = wake
        self.served = served
        """The group's served versions (:func:`discovery`), asked after a 404."""
        self.report = report
        """Told why the requests cannot be read as they should (empty: they can): the
        policies' status says it."""
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
                return self._not_found()
            if error.status == 403:
                self._unreadable(
                    "the operator may not list NodeMaintenances (403 Forbidden): grant list "
                    f"on {PLURAL}.{GROUP} (the chart's role does)"
                )
                return ABSENT_SECONDS
            if not is_transient(error):
                self._unreadable(f"listing NodeMaintenances failed: {error.status} {error.reason}")
            return self.interval
        except Exception as error:  # the poll goes on whatever one listing met
            self._say(f"listing NodeMaintenances failed: {error}")
            return self.interval
        items = {i["metadata"]["name"]: i for i in listing.get("items") or []}
        self._said = ""
        self.report("")
        self._changed(items)
        return self.interval

    def _not_found(self) -> float:
        """A 404: not installed (the requests went with it), or not in this version."""
        try:
            versions = self.served()
        except Exception as error:  # unknown which: keep what was read, ask again
            self._say(f"reading the {GROUP} API group failed: {error}")
            return self.interval
        if versions is None:
            if self.seen:
                self._say(
                    f"the {GROUP} API is gone (medik8s uninstalled?): its "
                    f"{len(self.seen)} NodeMaintenances ended with it"
                )
            self.report("")
            self._changed({})
            return ABSENT_SECONDS
        self._unreadable(
            f"{GROUP} serves {', '.join(versions) or 'no version'}, not {VERSION}, which "
            "this operator reads"
        )
        return self.interval  # an upgrade in progress, most likely: soon read again

    def _unreadable(self, why: str) -> None:
        """Said in the log and the policies' status; the requests last read are kept."""
        message = f"{why}; the {len(self.seen)} NodeMaintenances last read are kept"
        self._say(message)
        self.report(message)

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

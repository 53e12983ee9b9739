"""coordination.k8s.io/v1 Leases on the raw request path.

The election's requests must go out on time while the operator is busy: the
generated client's validation and model building cost more CPU than the request,
and in a 1,500-node benchmark the kubernetes client's ``leaderelection`` thread,
starved behind the rounds, lost the Lease. Here a Lease is JSON in and JSON out
(:func:`pitcrew.kube.client.request`), every call with its own short timeout, and
every write guarded by the resourceVersion it read: a write over a Lease someone
else changed in between answers 409 and changes nothing.
"""

from __future__ import annotations

import datetime
from typing import Any

from kubernetes import client

from pitcrew.api.vocabulary import ELECTION_LABEL
from pitcrew.core.lease import Record
from pitcrew.kube.client import request

API = "/apis/coordination.k8s.io/v1"


def path(namespace: str, name: str = "") -> str:
    collection = f"{API}/namespaces/{namespace}/leases"
    return f"{collection}/{name}" if name else collection


def listed(
    api: client.ApiClient, namespace: str, election: str, *, timeout: float
) -> list[dict[str, Any]]:
    """Every Lease of the election whose cluster shard is Lease ``election``, in one
    request (a few dozen small objects: no paging)."""
    answer = request(
        api,
        "GET",
        path(namespace),
        query={"labelSelector": f"{ELECTION_LABEL}={election}"},
        timeout=timeout,
    )
    return list(answer.get("items") or [])


def delete(api: client.ApiClient, lease: dict[str, Any], *, timeout: float) -> None:
    """Delete ``lease`` if it is still the version read (a member Lease long dead)."""
    meta = lease["metadata"]
    request(
        api,
        "DELETE",
        path(meta["namespace"], meta["name"]),
        body={"preconditions": {"resourceVersion": meta["resourceVersion"]}},
        timeout=timeout,
    )


def read(
    api: client.ApiClient, namespace: str, name: str, *, timeout: float
) -> dict[str, Any] | None:
    """The Lease, or None when there is none."""
    try:
        return request(api, "GET", path(namespace, name), timeout=timeout)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def create(api: client.ApiClient, lease: dict[str, Any], *, timeout: float) -> dict[str, Any]:
    """Create ``lease``; a 409 when another candidate created it first."""
    namespace = lease["metadata"]["namespace"]
    return request(api, "POST", path(namespace), body=lease, timeout=timeout)


def replace(api: client.ApiClient, lease: dict[str, Any], *, timeout: float) -> dict[str, Any]:
    """Write ``lease`` over the one whose resourceVersion it carries; a 409 when the
    Lease changed since."""
    meta = lease["metadata"]
    return request(api, "PUT", path(meta["namespace"], meta["name"]), body=lease, timeout=timeout)


def record(lease: dict[str, Any]) -> Record:
    spec = lease.get("spec") or {}
    return Record(
        holder=spec.get("holderIdentity") or "",
        duration=float(spec.get("leaseDurationSeconds") or 0),
        transitions=int(spec.get("leaseTransitions") or 0),
        version=str(lease.get("metadata", {}).get("resourceVersion") or ""),
    )


def micro_time(at: datetime.datetime) -> str:
    """A ``MicroTime`` as the apiserver writes one."""
    return at.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def held(
    *,
    namespace: str,
    name: str,
    identity: str,
    seconds: int,
    now: datetime.datetime,
    election: str,
    before: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The Lease held by ``identity`` from ``now``: a new one, or ``before`` (the Lease
    as read, its resourceVersion guarding the write) taken over or renewed, labelled
    with its ``election`` (:func:`listed`). Taking it
    from another holder (or from none) counts a transition and starts its
    ``acquireTime``; a renewal changes only ``renewTime``."""
    spec = dict((before or {}).get("spec") or {})
    stamp = micro_time(now)
    if spec.get("holderIdentity") != identity:
        spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if before else 0)
        spec["acquireTime"] = stamp
    spec.update(holderIdentity=identity, leaseDurationSeconds=seconds, renewTime=stamp)
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if before is not None:
        meta = {**before["metadata"], **meta}
    meta["labels"] = {**(meta.get("labels") or {}), ELECTION_LABEL: election}
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}


def given_back(lease: dict[str, Any], *, now: datetime.datetime) -> dict[str, Any]:
    """``lease`` given back (client-go's release): no holder, a one-second duration, so
    any candidate takes it at once without waiting out the holder's duration."""
    spec = {
        **(lease.get("spec") or {}),
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "renewTime": micro_time(now),
    }
    return {**lease, "spec": spec}

"""Which pods of a training job to restart in place when Pitcrew takes one of its nodes out.

A synchronous job whose pod is evicted from a faulted node does not stop: its other
ranks wait in their next collective until the NCCL watchdog (ten minutes by default)
or Pitcrew's hang rule (:mod:`pitcrew.core.hangs`) ends them, and then the launcher
(a JobSet's failure policy, say) usually deletes and recreates every pod: scheduling,
image and volume setup, at the job's size. Kubernetes can do better where the pod
asks for it: a container that declares a ``restartPolicyRules`` rule with action
``RestartAllContainers`` on an exit code has the kubelet restart all the pod's
containers, init containers too, in the same pod (same node, IP and volumes; no
scheduling, no image pull) when it exits with that code (KEP-5532, beta and on by
default since Kubernetes 1.36).

So when the lifecycle evicts or deletes a job's pod from a node it takes out, it
asks for the job's survivors to restart in place (:class:`pitcrew.core.actions.RestartInPlace`),
and the shell writes ``pitcrew.dev/restart-requested: <the drain's start>`` on
each pod this module picks: running, on a node not being taken out, declaring such a
rule, whose containers last started before the drain (not restarted since), and not
asked already for this drain or a later one. The training hook on each pod
(:mod:`pitcrew.client.restart`) sees the request and exits with the rule's code; the
replacement of the evicted pod still starts where the scheduler puts it (the spare
reserved for the job). The request's value is the drain's start, not the time it is
written, so a decision made again (each round while the drain evicts) asks nobody
twice, and a pod that restarted since is never asked again for the same fault: one
request per pod per drain, never a loop. Pods without the rule are left to the
launcher, as before.
"""

from __future__ import annotations

import datetime
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pitcrew.api.vocabulary import RESTART_REQUESTED_ANNOTATION

RESTART_ALL = "RestartAllContainers"
"""The ``restartPolicyRules`` action that restarts every container of the pod in place."""


def restart_exit_code(spec: Mapping[str, Any]) -> int | None:
    """The exit code that restarts a pod in place: the first value of the first
    ``RestartAllContainers`` rule with operator ``In``, in the order of the pod's
    containers, then its init containers; None where no container declares one (a
    ``NotIn`` rule names the codes that do *not* restart, so no code is sure to)."""
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        for rule in container.get("restartPolicyRules") or []:
            codes = rule.get("exitCodes") or {}
            values = codes.get("values") or []
            if rule.get("action") == RESTART_ALL and codes.get("operator") == "In" and values:
                return int(values[0])
    return None


def requested_at(annotations: Mapping[str, str]) -> datetime.datetime | None:
    """The drain a pod was asked to restart for (``pitcrew.dev/restart-requested``)."""
    return _time(annotations.get(RESTART_REQUESTED_ANNOTATION))


def encode(moment: datetime.datetime) -> str:
    """The annotation's value: RFC 3339 in UTC, to the microsecond."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, kw_only=True)
class Member:
    """A pod of the job as this rule reads it."""

    namespace: str
    name: str
    uid: str
    node: str
    running: bool
    """Phase Running and not being deleted."""
    declares: bool
    """A container declares a ``RestartAllContainers`` rule on an exit code."""
    started_at: datetime.datetime | None
    """When its containers last started (the latest): after the drain, it restarted."""
    requested: datetime.datetime | None
    """The drain it was last asked to restart for."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def member(pod: Mapping[str, Any]) -> Member:
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    starts = [
        moment
        for c in status.get("containerStatuses") or []
        if (moment := _time(((c.get("state") or {}).get("running") or {}).get("startedAt")))
    ]
    return Member(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        node=str(spec.get("nodeName") or ""),
        running=status.get("phase") == "Running" and meta.get("deletionTimestamp") is None,
        declares=restart_exit_code(spec) is not None,
        started_at=max(starts, default=None),
        requested=requested_at(meta.get("annotations") or {}),
    )


def survivors(
    members: Iterable[Member], *, since: datetime.datetime, taken: Collection[str]
) -> tuple[Member, ...]:
    """The job's pods to ask to restart in place for the drain that began ``since``:
    running, not on a node in ``taken`` (being taken out: their pods are the ones
    replaced), declaring the rule, not restarted since the drain began and not asked
    for it (or a later one) yet."""
    return tuple(
        m
        for m in members
        if m.running
        and m.declares
        and m.node not in taken
        and (m.started_at is None or m.started_at < since)
        and (m.requested is None or m.requested < since)
    )


def _time(value: Any) -> datetime.datetime | None:
    if not value:
        return None
    try:
        moment = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)

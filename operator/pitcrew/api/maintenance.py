"""MaintenanceWindow: nodes taken out on a schedule (a firmware update, a switch
replacement) and revalidated after.

Before ``start`` (by the policy's ``checkpointMaxDelay``) each node is cordoned and
drained at its jobs' next checkpoint, under a budget of its own (as many nodes as
``maxUnhealthy``, never counted by the circuit breaker) and ``maxConcurrentDrains``;
it stays out (phase Maintenance) until ``end`` and is then revalidated before it
takes work. No remediation starts on a node while a window over it is on.
medik8s's NodeMaintenance, when that API is installed, is honoured the same way (a
window from its creation until it is deleted), so a cluster that has it needs no
second request object; it has no schedule, which is why Pitcrew has this one.

A window's ``nodeSelector`` names only labels a node's kubelet cannot write
(:func:`kubelet_may_set`): root on a GPU node holds the kubelet's credentials, and
with a label it may write it could put its node into a window (out of service,
spending the window's budget) or out of one (kept in service while people work on
the machine). The NodeRestriction admission plugin keeps kubelets off the labels of
the ``kubernetes.io`` and ``k8s.io`` namespaces but for the ones they report
themselves; ``node-restriction.kubernetes.io/`` is reserved for exactly this. A
window selecting by any other label is refused when read (it covers no node, and the
operator says why); name such nodes with ``nodes``.
"""

from __future__ import annotations

import re
from typing import ClassVar

from pydantic import ConfigDict, Field, model_validator

from pitcrew.api.meta import ApiModel, LabelSelector, Resource, Timestamp, cel, validations

_RESTRICTED = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)*(kubernetes|k8s)\.io/")
"""Label keys in the ``kubernetes.io`` and ``k8s.io`` namespaces (and their subdomains),
which NodeRestriction keeps kubelets off, but for those below."""
_KUBELET_NAMESPACES = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)*(kubelet|node)\.kubernetes\.io/"
)
KUBELET_LABELS = frozenset(
    {
        "kubernetes.io/hostname",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/instance-type",
        "failure-domain.beta.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
    }
)
"""The labels a kubelet reports itself, which NodeRestriction lets it set (Kubernetes
``k8s.io/kubelet/pkg/apis``, ``kubeletLabels``)."""


def kubelet_may_set(key: str) -> bool:
    """Whether a node's kubelet may write label ``key`` on its own Node under the
    NodeRestriction admission plugin: any key outside the ``kubernetes.io`` and ``k8s.io``
    namespaces, the labels it reports itself, and the ``kubelet.kubernetes.io`` and
    ``node.kubernetes.io`` namespaces."""
    if not _RESTRICTED.match(key):
        return True
    return key in KUBELET_LABELS or bool(_KUBELET_NAMESPACES.match(key))


class MaintenanceWindowSpec(ApiModel):
    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "timestamp(self.end) > timestamp(self.start)",
                "end must be after start",
            ),
            cel(
                "has(self.nodeSelector) || size(self.nodes) > 0",
                "name the nodes: a nodeSelector or a list of nodes",
            ),
        )
    )

    start: Timestamp = Field(description="When the work begins: the nodes are out by then.")
    end: Timestamp = Field(description="When the work is done: the nodes are revalidated.")
    node_selector: LabelSelector | None = Field(
        default=None,
        description="The nodes, by label (with or instead of `nodes`): only labels a "
        "node's kubelet may not write on its Node (node-restriction.kubernetes.io/..., "
        "node-role.kubernetes.io/...); a window selecting by another is refused when "
        "read and covers no node.",
    )
    nodes: list[str] = Field(
        default_factory=list, max_length=5000, description="The nodes, by name."
    )
    reason: str = Field(
        default="",
        max_length=256,
        description="What the work is; shown in Events and the nodes' status.",
    )

    @model_validator(mode="after")
    def _named_and_ordered(self) -> MaintenanceWindowSpec:
        if self.end <= self.start:
            raise ValueError("end must be after start")
        if self.node_selector is None and not self.nodes:
            raise ValueError("name the nodes: a nodeSelector or a list of nodes")
        selector = self.node_selector
        keys = (
            [*selector.match_labels, *(e.key for e in selector.match_expressions)]
            if (selector)
            else []
        )
        writable = sorted({k for k in keys if kubelet_may_set(k)})
        if writable:
            raise ValueError(
                f"nodeSelector names {', '.join(writable)}, which a node's kubelet may "
                "write on its own Node (root on the node could put it into or out of the "
                "window): select by labels under node-restriction.kubernetes.io/ (or "
                "another kubernetes.io label the kubelet may not set, such as "
                "node-role.kubernetes.io/), or name the nodes in `nodes`"
            )
        return self


class MaintenanceWindow(Resource):
    """Cluster-scoped: take the named nodes out from ``start`` to ``end``."""

    KIND: ClassVar[str] = "MaintenanceWindow"
    PLURAL: ClassVar[str] = "maintenancewindows"
    SHORT_NAMES: ClassVar[list[str]] = ["mw"]
    PRINTER_COLUMNS: ClassVar[list[dict[str, str | int]]] = [
        {"name": "Start", "type": "date", "jsonPath": ".spec.start"},
        {"name": "End", "type": "date", "jsonPath": ".spec.end"},
        {"name": "Reason", "type": "string", "jsonPath": ".spec.reason"},
    ]

    spec: MaintenanceWindowSpec

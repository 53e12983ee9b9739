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
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import ConfigDict, Field, model_validator

from pitcrew.api.meta import ApiModel, LabelSelector, Resource, Timestamp, cel, validations


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
        default=None, description="The nodes, by label (with or instead of `nodes`)."
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

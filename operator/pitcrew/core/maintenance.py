"""Which maintenance window covers a node: Pitcrew's MaintenanceWindows and medik8s's
NodeMaintenances, read into one shape.

Pure: the store holds the objects as watched or polled; these functions read them.
A NodeMaintenance (``nodemaintenance.medik8s.io``) names one node and has no
schedule: it is a window from its creation until it is deleted. An object that
does not parse (an older CRD, a hand edit) covers nothing and says why, once per
version, through the caller.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from pitcrew.api.maintenance import MaintenanceWindowSpec
from pitcrew.core.convert import matches, parse_time
from pitcrew.core.views import MaintenanceView


@dataclass(frozen=True)
class Window:
    view: MaintenanceView
    nodes: frozenset[str] = frozenset()
    selector: Mapping[str, Any] | None = None

    def covers(self, node: str, labels: Mapping[str, str]) -> bool:
        if node in self.nodes:
            return True
        return self.selector is not None and matches(dict(self.selector), dict(labels))


def window(obj: Mapping[str, Any]) -> Window:
    """A MaintenanceWindow as watched; ``ValueError`` saying why when it is none."""
    name = (obj.get("metadata") or {}).get("name")
    try:
        spec = MaintenanceWindowSpec.model_validate(obj.get("spec") or {})
    except ValidationError as error:
        raise ValueError(f"MaintenanceWindow {name}: {error}") from None
    selector = spec.node_selector.model_dump(by_alias=True) if spec.node_selector else None
    return Window(
        view=MaintenanceView(
            name=f"MaintenanceWindow/{name}",
            start=spec.start,
            end=spec.end,
            reason=spec.reason,
        ),
        nodes=frozenset(spec.nodes),
        selector=selector,
    )


def node_maintenance(obj: Mapping[str, Any]) -> Window:
    """A medik8s NodeMaintenance: its node, from its creation until it is deleted."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    node, created = spec.get("nodeName"), parse_time(meta.get("creationTimestamp"))
    if not isinstance(node, str) or not node or created is None:
        raise ValueError(f"NodeMaintenance {meta.get('name')}: no spec.nodeName or creation time")
    reason = spec.get("reason")
    return Window(
        view=MaintenanceView(
            name=f"NodeMaintenance/{meta.get('name')}",
            start=created,
            end=None,
            reason=reason if isinstance(reason, str) else "",
        ),
        nodes=frozenset({node}),
    )


def covering(
    node: str, labels: Mapping[str, str], windows: Iterable[Window], now: datetime.datetime
) -> MaintenanceView | None:
    """The earliest-starting window over ``node`` that has not ended."""
    found = [w.view for w in windows if not w.view.over(now) and w.covers(node, labels)]
    return min(found, key=lambda v: v.start, default=None)

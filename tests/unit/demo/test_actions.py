"""The demo's action list reads in the order things happened, whatever order the
Events are listed in (the operator posts them from a thread, a moment late)."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from pitcrew.dev.demo import runner
from pitcrew.dev.demo.runner import Demo, DemoOptions


def event(
    name: str, reason: str, at: str, *, count: int = 1, component: str = ""
) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "involvedObject": {"kind": "Node", "name": f"node-{name}"},
        "reason": reason,
        "message": f"{reason} happened",
        "count": 1,
        "lastTimestamp": at,
        "reportingComponent": component or runner.OPERATOR_COMPONENT,
    }


def test_actions_are_in_event_time_order_and_each_shown_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    listed: list[list[dict[str, Any]]] = [
        [event("b", "Quarantined", "2026-12-04T10:00:10Z")],
        [
            event("b", "Quarantined", "2026-12-04T10:00:10Z"),
            event("a", "Suspect", "2026-12-04T10:00:05Z"),
            event("c", "Draining", "2026-12-04T10:00:20Z"),
            event("x", "Other", "2026-12-04T10:00:01Z", component="someone-else"),
        ],
    ]
    monkeypatch.setattr(runner, "request", lambda *_args, **_kw: {"items": listed.pop(0)})
    demo = Demo(DemoOptions(), Console())
    demo._events(None)  # type: ignore[arg-type]
    assert demo.actions == ["node-b: Quarantined: Quarantined happened"]
    demo._events(None)  # type: ignore[arg-type]
    assert [line.split(":")[1].strip() for line in demo.actions] == [
        "Suspect",
        "Quarantined",
        "Draining",
    ]

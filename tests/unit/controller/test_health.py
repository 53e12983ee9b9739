"""The operator's liveness: a stuck loop or a frozen watch fails it; a standby passes."""

from __future__ import annotations

import datetime
import urllib.error
import urllib.request

import pytest

from pitcrew.controller import health
from pitcrew.dev.devcluster.cluster import free_port

NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)


def check(*, round_age: float, event_age: float | None, objects: int = 10) -> str | None:
    return health.leader_check(
        last_round=lambda: NOW - datetime.timedelta(seconds=round_age),
        last_event=lambda: (
            None if event_age is None else NOW - datetime.timedelta(seconds=event_age)
        ),
        watched_objects=lambda: objects,
        resync_seconds=15,
        watch_stale_seconds=900,
        clock=lambda: NOW,
    )


def test_a_fresh_leader_is_healthy() -> None:
    assert check(round_age=3, event_age=20) is None


def test_a_stuck_loop_fails() -> None:
    assert "loop is stuck" in (check(round_age=61, event_age=1) or "")


def test_a_silent_watch_fails_only_when_agents_should_be_talking() -> None:
    assert "watch is frozen" in (check(round_age=1, event_age=901) or "")
    assert check(round_age=1, event_age=901, objects=0) is None
    assert check(round_age=1, event_age=None) is None


def test_the_endpoint_answers_with_the_reason() -> None:
    port = free_port()
    problems = [None, "no reconcile round for 99s: the loop is stuck"]
    server = health.serve(port, live=lambda: problems[0])
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            assert response.read() == b"ok"
        problems.pop(0)
        with pytest.raises(urllib.error.HTTPError) as failed:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5)
        assert failed.value.code == 500
        assert b"loop is stuck" in failed.value.read()
    finally:
        server.shutdown()

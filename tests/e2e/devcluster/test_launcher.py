"""The launcher fails loudly and leaves nothing running."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from gpuhealth.models import get_model
from pitcrew.dev import devcluster
from pitcrew.dev.devcluster import cluster
from pitcrew.dev.devcluster.cluster import ClusterState, free_port, is_alive


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[ClusterState]:
    """Every state ``up`` saved, so a test can see what it started."""
    states: list[ClusterState] = []
    original_save = ClusterState.save

    def remember(self: ClusterState) -> None:
        states.append(self)
        original_save(self)

    monkeypatch.setattr(ClusterState, "save", remember)
    return states


def assert_nothing_left(started: list[ClusterState], directory: Path) -> None:
    processes = started[-1].processes
    assert processes
    assert not any(is_alive(p) for p in processes)
    assert not (directory / "state.json").exists()


def up_one_node(directory: Path, *, timeout: float) -> None:
    devcluster.up(
        directory=directory,
        node_count=1,
        gpus_per_node=8,
        model=get_model("H100"),
        timeout=timeout,
        log=lambda _: None,
    )


def test_start_past_its_timeout_names_the_component_and_stops_everything(
    tmp_path: Path, started: list[ClusterState]
) -> None:
    with pytest.raises(devcluster.DevclusterError) as caught:
        up_one_node(tmp_path / "c", timeout=0.0)
    assert "etcd: not healthy after 0s" in str(caught.value)
    assert "last lines of" in str(caught.value)
    assert_nothing_left(started, tmp_path / "c")


def test_component_that_exits_is_named_with_its_log_and_everything_stops(
    tmp_path: Path, started: list[ClusterState], monkeypatch: pytest.MonkeyPatch
) -> None:
    """kube-apiserver (the real binary; the first port ``up`` picks is its) is
    handed a port another process holds: it exits at once, and ``up``
    reports that exit rather than waiting out its timeout."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        ports = iter([taken])
        monkeypatch.setattr(cluster, "free_port", lambda: next(ports, None) or free_port())
        with pytest.raises(devcluster.DevclusterError) as caught:
            up_one_node(tmp_path / "c", timeout=120.0)
    message = str(caught.value)
    exited = r"kube-apiserver exited with code [1-9]\d* before ready; last lines of "
    assert re.match(exited, message)
    assert "address already in use" in message
    assert [p.name for p in started[-1].processes] == ["etcd", "kube-apiserver"]
    assert_nothing_left(started, tmp_path / "c")

"""Port handling of the devcluster launcher (no cluster needed)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gpuhealth.models import get_model
from pitcrew.dev import devcluster
from pitcrew.dev.devcluster.cluster import free_port


def test_port_in_use_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(
            devcluster.DevclusterError, match=rf"kube-apiserver: port 127\.0\.0\.1:{port} is in use"
        ):
            devcluster.up(
                directory=tmp_path,
                node_count=1,
                gpus_per_node=8,
                model=get_model("H100"),
                apiserver_port=port,
            )
    assert not (tmp_path / "state.json").exists()


def test_free_port_is_bindable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_port()))


def test_down_without_cluster_reports_nothing_to_stop(tmp_path: Path) -> None:
    messages: list[str] = []
    assert devcluster.down(directory=tmp_path, log=messages.append) is False
    assert messages == [f"no devcluster in {tmp_path.resolve()}"]

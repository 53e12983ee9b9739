"""The launcher fails loudly and leaves nothing running."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuhealth.models import get_model
from pitcrew import devcluster
from pitcrew.devcluster.cluster import ClusterState, is_alive


def test_start_past_its_timeout_names_the_component_and_stops_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[ClusterState] = []
    original_save = ClusterState.save

    def remember(self: ClusterState) -> None:
        started.append(self)
        original_save(self)

    monkeypatch.setattr(ClusterState, "save", remember)
    with pytest.raises(devcluster.DevclusterError) as caught:
        devcluster.up(
            directory=tmp_path / "c",
            node_count=1,
            gpus_per_node=8,
            model=get_model("H100"),
            timeout=0.0,
            log=lambda _: None,
        )
    assert "etcd: not healthy after 0s" in str(caught.value)
    assert "last lines of" in str(caught.value)
    processes = started[-1].processes
    assert processes
    assert not any(is_alive(p) for p in processes)
    assert not (tmp_path / "c" / "state.json").exists()

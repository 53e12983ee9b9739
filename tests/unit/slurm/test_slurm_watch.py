"""The operator's view of Slurm: one read for all nodes, jobs only for the nodes it
takes out, a wake for each change, nothing for a name two nodes claim or a stale read."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from pitcrew.api.policy import SlurmSpec
from pitcrew.controller.slurm import SlurmWatch
from pitcrew.core.slurm import Read
from pitcrew.core.views import SlurmNodeView
from pitcrew.slurm.control import SlurmError

CHECKPOINTED = (
    '{"step": 900, "time": "2026-12-05T01:00:00Z", "checkpointStep": 800, '
    '"checkpointTime": "2026-12-05T00:58:00Z"}'
)


@dataclass
class FakeSlurm:
    """Stands in for the tools (the e2e tests run the real ones)."""

    nodes_now: dict[str, SlurmNodeView]
    job_reads: list[str] = field(default_factory=list)
    down: bool = False

    def nodes(self) -> Read[dict[str, SlurmNodeView]]:
        if self.down:
            raise SlurmError(
                "slurm_load_node error: Unable to contact slurm controller", transient=True
            )
        return Read(dict(self.nodes_now))

    def jobs(self, node: str) -> Read[tuple[tuple[str, str], ...]]:
        self.job_reads.append(node)
        return Read((("41", CHECKPOINTED),))


def watch_of(slurm: FakeSlurm) -> tuple[SlurmWatch, list[list[str]], list[float]]:
    woken: list[list[str]] = []
    now = [0.0]
    watch = SlurmWatch(
        slurm, interval=10, wake=lambda n: woken.append(list(n)), clock=lambda: now[0]
    )  # type: ignore[arg-type]
    return watch, woken, now


def test_a_change_in_slurm_wakes_the_kubernetes_node_it_belongs_to() -> None:
    slurm = FakeSlurm({"n1": SlurmNodeView("n1", ("IDLE",))})
    watch, woken, _ = watch_of(slurm)
    watch.poll()
    assert watch.view("n1", [], SlurmSpec(), taking_out=False)[0] == SlurmNodeView("n1", ("IDLE",))
    slurm.nodes_now["n1"] = SlurmNodeView("n1", ("IDLE", "DRAIN"), reason="pitcrew: Xid")
    watch.poll()
    assert woken[-1] == ["n1"]


def test_jobs_are_read_only_for_busy_nodes_being_taken_out_with_their_checkpoints() -> None:
    slurm = FakeSlurm(
        {"n1": SlurmNodeView("n1", ("MIXED",)), "n2": SlurmNodeView("n2", ("MIXED",))}
    )
    watch, _, _ = watch_of(slurm)
    watch.view("n1", [], SlurmSpec(), taking_out=True)
    watch.view("n2", [], SlurmSpec(), taking_out=False)
    watch.poll()
    assert slurm.job_reads == ["n1"]
    view, _ = watch.view("n1", [], SlurmSpec(), taking_out=True)
    assert view is not None
    assert view.jobs is not None
    assert view.jobs[0].id == "41"
    assert view.jobs[0].checkpoint_at is not None
    assert view.jobs[0].checkpoint_at.isoformat() == "2026-12-05T00:58:00+00:00"


def test_a_slurm_name_two_nodes_claim_is_used_for_neither() -> None:
    slurm = FakeSlurm({"compute-1": SlurmNodeView("compute-1", ("IDLE",))})
    watch, _, _ = watch_of(slurm)
    watch.poll()
    pod = {
        "metadata": {
            "namespace": "slurm",
            "name": "p",
            "labels": {SlurmSpec().node_name_label: "compute-1"},
        },
        "status": {"phase": "Running"},
    }
    assert watch.view("k1", [pod], SlurmSpec(), taking_out=False)[0] is not None
    assert watch.view("k2", [pod], SlurmSpec(), taking_out=False)[0] is None
    assert watch.view("k1", [pod], SlurmSpec(), taking_out=False)[0] is None


def test_a_stale_read_gives_no_view_so_nothing_is_done_in_slurm_on_old_facts() -> None:
    slurm = FakeSlurm({"n1": SlurmNodeView("n1", ("IDLE",))})
    watch, _, now = watch_of(slurm)
    watch.poll()
    slurm.down = True
    now[0] = 25.0
    with pytest.raises(SlurmError):
        watch.poll()
    assert watch.view("n1", [], SlurmSpec(), taking_out=False)[0] is None

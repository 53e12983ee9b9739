"""The operator's view of Slurm: one read for all nodes, jobs only for the nodes it
takes out, a wake for each change, nothing for a name two nodes claim or a stale read."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterable

import pytest

from pitcrew.api.policy import SlurmSpec
from pitcrew.controller.slurm import SlurmWatch
from pitcrew.core.convert import EPOCH
from pitcrew.core.views import SlurmJobView, SlurmNodeView, SlurmUnreadable
from pitcrew.slurm.control import SlurmError
from support.slurm_fakes import CHECKPOINTED, FakeSlurm


def watch_of(slurm: FakeSlurm) -> tuple[SlurmWatch, list[list[str]], list[float]]:
    woken: list[list[str]] = []
    now = slurm.clock
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
    assert view.jobs[0].checkpoint_at == EPOCH  # had before it was first read


def test_a_slurm_jobs_checkpoint_is_dated_by_the_operators_clock_never_the_nodes() -> None:
    """The comment's checkpoint time is the node's clock: 3 hours ahead here, it would
    make a checkpoint from before the take-out look new and start the drain before the
    job's next one. The watch dates it when it saw the comment change."""
    slurm = FakeSlurm({"n1": SlurmNodeView("n1", ("MIXED",))})
    seen = datetime.datetime(2026, 12, 5, 1, 0, tzinfo=datetime.UTC)
    watch = SlurmWatch(slurm, interval=10, wake=lambda _: None, now=lambda: seen)  # type: ignore[arg-type]
    watch.view("n1", [], SlurmSpec(), taking_out=True)
    watch.poll()
    assert jobs_of(watch)[0].checkpoint_at == EPOCH
    slurm.job_comment = (
        '{"step": 950, "time": "2026-12-05T04:02:00Z", "checkpointStep": 900, '
        '"checkpointTime": "2026-12-05T04:01:00Z"}'
    )
    watch.poll()
    assert jobs_of(watch)[0].checkpoint_at == seen
    later = seen
    seen = seen + datetime.timedelta(minutes=5)
    watch.poll()  # the same checkpoint read again keeps its date
    assert jobs_of(watch)[0].checkpoint_at == later


def test_a_slurm_jobs_first_checkpoint_after_reads_without_one_is_dated_when_seen() -> None:
    """The job reported steps but no checkpoint yet when the node was taken out; the
    checkpoint it reports next is new, not one it had before (as on real daemons:
    tests/e2e/slurm/test_slurm_drain.py)."""
    slurm = FakeSlurm(
        {"n1": SlurmNodeView("n1", ("MIXED",))},
        job_comment='{"step": 10, "time": "2026-12-05T01:00:00Z"}',
    )
    seen = datetime.datetime(2026, 12, 5, 1, 0, tzinfo=datetime.UTC)
    watch = SlurmWatch(slurm, interval=10, wake=lambda _: None, now=lambda: seen)  # type: ignore[arg-type]
    watch.view("n1", [], SlurmSpec(), taking_out=True)
    watch.poll()
    assert jobs_of(watch)[0].checkpoint_at is None
    slurm.job_comment = CHECKPOINTED
    watch.poll()
    assert jobs_of(watch)[0].checkpoint_at == seen


def jobs_of(watch: SlurmWatch) -> tuple[SlurmJobView, ...]:
    view, _ = watch.view("n1", [], SlurmSpec(), taking_out=True)
    assert isinstance(view, SlurmNodeView)
    assert view.jobs is not None
    return view.jobs


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
    assert isinstance(watch.view("k1", [pod], SlurmSpec(), taking_out=False)[0], SlurmNodeView)
    assert isinstance(watch.view("k2", [pod], SlurmSpec(), taking_out=False)[0], SlurmUnreadable)
    assert isinstance(watch.view("k1", [pod], SlurmSpec(), taking_out=False)[0], SlurmUnreadable)


def test_a_stale_read_is_an_unreadable_node_never_no_slurm_node() -> None:
    slurm = FakeSlurm({"n1": SlurmNodeView("n1", ("IDLE",))})
    watch, _, now = watch_of(slurm)
    watch.poll()
    slurm.down = True
    now[0] = watch.stale_after + 1
    with pytest.raises(SlurmError):
        watch.poll()
    view = watch.view("n1", [], SlurmSpec(), taking_out=False)[0]
    assert isinstance(view, SlurmUnreadable)
    assert view.name == "n1"
    assert "Unable to contact slurm controller" in view.why


def slurmd_pod(slurm_name: str, name: str = "p") -> dict[str, object]:
    return {
        "metadata": {
            "namespace": "slurm",
            "name": name,
            "labels": {SlurmSpec().node_name_label: slurm_name},
        },
        "status": {"phase": "Running"},
    }


@pytest.mark.parametrize(
    ("kubernetes", "slurm_nodes", "expected"),
    [
        ("gpu-1.example.com", ["gpu-1", "gpu-2"], "gpu-1"),  # FQDN node, short NodeName
        ("gpu-1", ["gpu-1.cluster.local", "gpu-2.cluster.local"], "gpu-1.cluster.local"),
        ("gpu-1.example.com", ["gpu-1.example.com", "gpu-1"], "gpu-1.example.com"),  # exact
    ],
)
def test_a_kubernetes_fqdn_and_a_short_slurm_name_are_one_node(
    kubernetes: str, slurm_nodes: list[str], expected: str
) -> None:
    slurm = FakeSlurm({n: SlurmNodeView(n, ("ALLOCATED",)) for n in slurm_nodes})
    watch, _, _ = watch_of(slurm)
    watch.poll()
    view = watch.view(kubernetes, [], SlurmSpec(), taking_out=False)[0]
    assert isinstance(view, SlurmNodeView)
    assert view.name == expected


def test_a_name_that_stands_for_two_slurm_nodes_is_unreadable_not_absent() -> None:
    slurm = FakeSlurm(
        {n: SlurmNodeView(n, ("IDLE",)) for n in ("gpu-1.a.example", "gpu-1.b.example")}
    )
    watch, _, _ = watch_of(slurm)
    watch.poll()
    view = watch.view("gpu-1", [], SlurmSpec(), taking_out=False)[0]
    assert isinstance(view, SlurmUnreadable)
    assert "gpu-1.a.example, gpu-1.b.example" in view.why
    other_domain = watch.view("gpu-1.c.example", [], SlurmSpec(), taking_out=False)[0]
    assert other_domain is None  # not a short form of either: no Slurm node


def test_a_node_whose_slurm_entry_does_not_parse_is_unreadable_not_absent() -> None:
    slurm = FakeSlurm({"n2": SlurmNodeView("n2", ("IDLE",))}, failed={"n1": "bad state"})
    watch, _, _ = watch_of(slurm)
    watch.poll()
    view = watch.view("n1", [], SlurmSpec(), taking_out=False)[0]
    assert isinstance(view, SlurmUnreadable)
    assert "bad state" in view.why
    assert watch.view("n3", [], SlurmSpec(), taking_out=False)[0] is None  # whole read
    slurm.nameless = 1
    watch.poll()
    assert isinstance(watch.view("n3", [], SlurmSpec(), taking_out=False)[0], SlurmUnreadable)


def test_a_slurmd_pod_naming_a_node_slurm_does_not_list_is_unreadable() -> None:
    slurm = FakeSlurm({"compute-2": SlurmNodeView("compute-2", ("IDLE",))})
    watch, _, _ = watch_of(slurm)
    watch.poll()
    view, slurmd = watch.view("k1", [slurmd_pod("compute-1")], SlurmSpec(), taking_out=False)
    assert isinstance(view, SlurmUnreadable)
    assert slurmd == "slurm/p"


def test_the_claim_of_a_deleted_node_is_forgotten() -> None:
    """A node replaced by another (its slurmd pod rescheduled there) must not leave a
    second claim behind that makes its Slurm node unreadable for ever."""
    slurm = FakeSlurm({"compute-1": SlurmNodeView("compute-1", ("IDLE",))})
    watch, _, _ = watch_of(slurm)
    watch.poll()
    assert isinstance(
        watch.view("old", [slurmd_pod("compute-1")], SlurmSpec(), taking_out=False)[0],
        SlurmNodeView,
    )
    watch.forget("old")
    view = watch.view("new", [slurmd_pod("compute-1", "p2")], SlurmSpec(), taking_out=False)[0]
    assert isinstance(view, SlurmNodeView)


def test_a_slow_squeue_never_ages_the_node_view() -> None:
    """Each squeue takes longer than the poll interval. Decisions taken meanwhile (on the
    round loop's thread) still see the nodes, read before the jobs; a poll reads jobs for
    one interval at most, and the rest first in the next poll."""
    busy = {f"n{i}": SlurmNodeView(f"n{i}", ("MIXED", "DRAIN")) for i in range(4)}
    seen: list[object] = []
    slurm = FakeSlurm(busy, squeue_seconds=25.0)
    watch, _, now = watch_of(slurm)
    slurm.during_squeue = lambda: seen.extend(
        watch.view(n, [], SlurmSpec(), taking_out=True)[0] for n in busy
    )
    for name in busy:
        watch.view(name, [], SlurmSpec(), taking_out=True)
    for _ in range(6):
        watch.poll()
        now[0] += watch.interval  # the wait between polls
    assert seen
    assert all(isinstance(v, SlurmNodeView) for v in seen)
    assert set(slurm.job_reads) == set(busy)


def test_the_nodes_are_woken_once_slurm_has_not_answered_for_too_long() -> None:
    """Their decisions then say (and wait) at once, not at the next event or resync."""
    stop = threading.Event()
    woken: list[list[str]] = []
    slurm = FakeSlurm({"n1": SlurmNodeView("n1", ("MIXED",))})

    def wake(nodes: Iterable[str]) -> None:
        woken.append(list(nodes))
        stop.set()
        watch.poked.set()

    watch = SlurmWatch(slurm, interval=10, wake=wake, clock=lambda: slurm.clock[0])  # type: ignore[arg-type]
    watch.poll()
    watch.view("n1", [], SlurmSpec(), taking_out=True)
    slurm.down = True
    slurm.clock[0] = watch.stale_after + 1
    watch.run(stop)
    assert woken == [["n1"]]

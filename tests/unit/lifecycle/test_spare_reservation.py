"""A spare serves the job that lost a node: reserved for it, claimed by its pod, or given back."""

from __future__ import annotations

import dataclasses
import datetime
import re
from typing import TypeVar

from gpuhealth.report import FaultClass
from pitcrew.api.gpunode import GPUNodeStatus, Phase, ReservationStatus
from pitcrew.api.vocabulary import RESERVED_TAINT, SPARE_TAINT
from pitcrew.core import actions as a
from pitcrew.core import node_edits
from pitcrew.core.job_discovery import TAINT_VALUE_MAX, taint_value
from pitcrew.core.lifecycle import Decision, decide
from pitcrew.core.round import Due, decide_round
from pitcrew.core.views import FleetView, NodeView, PodView, Taint
from support.lifecycle_data import T0, finding, fleet, node, pod, policy, report, state, status

K = TypeVar("K")

JOB = "train.llm"
"""Job ``llm`` of namespace ``train`` (:func:`support.lifecycle_data.pod`), as a
reservation names it."""
SPARE = "gpu-node-0099"
SPARES = policy(spares={"count": 1}, safety={"maxUnhealthy": 5})
FATAL = report(finding(FaultClass.FATAL))
RESERVED = Taint(RESERVED_TAINT, JOB)
MINUTE = datetime.timedelta(minutes=1)
NEVER_WAITED = datetime.timedelta(hours=2, minutes=35)
"""The default checkpointMaxDelay (2h) and drain timeout (30m), and the reservation
timeout (5m): how long a reservation lasts whose job's pods never waited."""


def of(kind: type[K], decision: Decision) -> list[K]:
    return [x for x in decision.actions if isinstance(x, kind)]


def waiting(name: str, *, tolerates: str = "", job: str = "llm") -> PodView:
    """A pod of the job that waits for a node (the shell hands these to a reserved node)."""
    return dataclasses.replace(pod(name, job=job), tolerates=tolerates)


def reserved_node(*, pods: tuple[PodView, ...] = ()) -> NodeView:
    return node(SPARE, taints=(RESERVED,), pods=pods)


def held(
    *, since: datetime.datetime = T0, waiting_since: datetime.datetime | None = None
) -> GPUNodeStatus:
    """A Healthy node whose status already records its reservation."""
    reservation = ReservationStatus(job=JOB, since=since, waiting_since=waiting_since)
    return status(Phase.HEALTHY, reason="SpareReserved", reservation=reservation)


def decided_reserved(
    view: NodeView,
    node_status: GPUNodeStatus,
    *,
    pods_waiting: tuple[PodView, ...] = (),
    now: datetime.datetime = T0,
    pool: FleetView | None = None,
) -> Decision:
    current = dataclasses.replace(state(view, node_status), waiting=pods_waiting)
    return decide(state=current, policy=SPARES, fleet=pool or fleet(quarantined=1), now=now)


# -- taken out: whom the spares serve -----------------------------------------------------


def test_a_node_running_a_job_taken_out_reserves_the_oldest_spare_for_that_job() -> None:
    busy = node(pods=(pod("trainer-0"),))
    decision = decide(
        state=state(busy, status(checks=FATAL)),
        policy=policy(spares={"count": 2}),
        fleet=fleet(spares=(SPARE, "gpu-node-0098"), spare=2),
        now=T0,
    )
    assert decision.phase is Phase.QUARANTINED
    assert [(r.node, r.job) for r in of(a.ReserveSpare, decision)] == [(SPARE, JOB)]
    assert not of(a.ReleaseSpare, decision)


def test_a_node_running_no_training_job_releases_a_spare_to_any_work() -> None:
    web = node(pods=(pod("web-0", job=""),))
    decision = decide(
        state=state(web, status(checks=FATAL)),
        policy=SPARES,
        fleet=fleet(spares=(SPARE,), spare=1),
        now=T0,
    )
    assert [r.node for r in of(a.ReleaseSpare, decision)] == [SPARE]
    assert not of(a.ReserveSpare, decision)


def test_each_job_on_the_node_gets_a_spare_while_they_last_the_largest_first() -> None:
    shared = node(pods=(pod("a-0", job="small"), pod("b-0", job="big"), pod("b-1", job="big")))
    decision = decide(
        state=state(shared, status(checks=FATAL)),
        policy=SPARES,
        fleet=fleet(spares=(SPARE,), spare=1),
        now=T0,
    )
    assert [(r.node, r.job) for r in of(a.ReserveSpare, decision)] == [(SPARE, "train.big")]


def test_two_nodes_taken_out_in_one_round_reserve_two_different_spares() -> None:
    spares = ("gpu-node-0098", SPARE)
    nodes = {
        "gpu-node-0001": node("gpu-node-0001", pods=(pod("a-0", job="a"),)),
        "gpu-node-0002": node("gpu-node-0002", pods=(pod("b-0", job="b"),)),
    }
    done = decide_round(
        nodes,
        read=lambda name: Due(state=state(nodes[name], status(checks=FATAL)), policy=SPARES),
        fleet=lambda _: fleet(spares=spares, spare=2),
        now=T0,
    )
    reserved = [(r.node, r.job) for d in done.decided for r in of(a.ReserveSpare, d.decision)]
    assert reserved == [("gpu-node-0098", "train.a"), (SPARE, "train.b")]
    assert done.fleets["fleet"].spares == ()


# -- the reserved node --------------------------------------------------------------------


def test_a_spare_that_finds_itself_reserved_is_healthy_for_the_job_and_says_since_when() -> None:
    decision = decided_reserved(reserved_node(), status(Phase.SPARE, reason="HeldAsSpare"))
    assert decision.phase is Phase.HEALTHY
    assert decision.status.reason == "SpareReserved"
    assert decision.status.reservation == ReservationStatus(job=JOB, since=T0)
    assert not of(a.Tolerate, decision)
    assert not of(a.RemoveTaint, decision)
    assert decision.wake_at == T0 + NEVER_WAITED


def test_only_the_jobs_waiting_pods_that_lack_the_toleration_get_it() -> None:
    pods = (
        waiting("trainer-1"),
        waiting("trainer-2", tolerates=JOB),
        waiting("other-0", job="other"),
    )
    decision = decided_reserved(reserved_node(), held(), pods_waiting=pods, now=T0 + MINUTE)
    tolerate = of(a.Tolerate, decision)
    assert [[p.name for p in t.pods] for t in tolerate] == [["trainer-1"]]
    assert (tolerate[0].taint, tolerate[0].value) == (RESERVED_TAINT, JOB)
    assert decision.status.reservation is not None
    assert decision.status.reservation.waiting_since == T0 + MINUTE
    assert decision.wake_at == T0 + 6 * MINUTE  # the timeout counts from the first wait


def test_deciding_again_on_what_the_decision_left_does_nothing() -> None:
    pods = (waiting("trainer-1", tolerates=JOB),)
    first = decided_reserved(reserved_node(), held(), pods_waiting=pods, now=T0 + MINUTE)
    again = decided_reserved(reserved_node(), first.status, pods_waiting=pods, now=T0 + 2 * MINUTE)
    assert not again.actions
    assert again.status.reservation == first.status.reservation


def test_the_reservation_ends_once_the_jobs_pod_runs_on_it() -> None:
    claimed = reserved_node(pods=(pod("trainer-1"),))
    decision = decided_reserved(claimed, held(waiting_since=T0), now=T0 + MINUTE)
    assert decision.phase is Phase.HEALTHY
    assert decision.status.reason == "SpareClaimed"
    assert decision.status.reservation is None
    assert [r.taint for r in of(a.RemoveTaint, decision)] == [RESERVED_TAINT]


def test_a_pod_of_another_job_does_not_claim_it() -> None:
    other = reserved_node(pods=(pod("x-0", job="other"),))
    decision = decided_reserved(other, held(), now=T0 + MINUTE)
    assert decision.status.reservation is not None
    assert not of(a.RemoveTaint, decision)


def test_unclaimed_after_the_timeout_it_takes_any_work_when_the_pool_wants_no_spare() -> None:
    decision = decided_reserved(
        reserved_node(),
        held(waiting_since=T0),
        pods_waiting=(waiting("trainer-1", tolerates=JOB),),
        now=T0 + 5 * MINUTE + datetime.timedelta(seconds=1),
    )
    assert decision.phase is Phase.HEALTHY
    assert decision.status.reason == "ReservationExpired"
    assert decision.status.reservation is None
    assert [r.taint for r in of(a.RemoveTaint, decision)] == [RESERVED_TAINT]
    assert not of(a.Tolerate, decision)


def test_unclaimed_after_the_timeout_it_is_a_spare_again_when_the_pool_is_short() -> None:
    decision = decided_reserved(
        reserved_node(),
        held(waiting_since=T0),
        now=T0 + 6 * MINUTE,
        pool=fleet(),  # nobody out: the pool wants its one spare
    )
    assert decision.phase is Phase.SPARE
    taint = of(a.SetTaint, decision)
    assert [(t.taint, t.replaces) for t in taint] == [(SPARE_TAINT, RESERVED_TAINT)]
    assert not of(a.RemoveTaint, decision)


def test_a_reservation_whose_pods_never_wait_lasts_until_the_jobs_node_has_drained() -> None:
    before = decided_reserved(reserved_node(), held(), now=T0 + NEVER_WAITED - MINUTE)
    assert before.status.reservation is not None
    assert before.wake_at == T0 + NEVER_WAITED
    after = decided_reserved(reserved_node(), held(), now=T0 + NEVER_WAITED + MINUTE)
    assert after.status.reason == "ReservationExpired"


def test_a_reserved_node_is_neither_held_as_a_spare_nor_verified() -> None:
    periodic = policy(
        spares={"count": 2},
        validation={"priorityClassName": "probe", "periodic": {"enabled": True}},
    )
    current = state(reserved_node(), held())
    decision = decide(state=current, policy=periodic, fleet=fleet(), now=T0 + MINUTE)
    assert decision.phase is Phase.HEALTHY
    assert not of(a.SetTaint, decision)
    assert not of(a.StartProbe, decision)


def test_a_node_whose_reservation_taint_is_gone_forgets_it() -> None:
    decision = decided_reserved(node(SPARE), held(), now=T0 + MINUTE)
    assert decision.status.reservation is None


def test_a_reserved_node_that_fails_is_taken_out_and_serves_nobody() -> None:
    failing = held().model_copy(update={"checks": FATAL})
    decision = decided_reserved(reserved_node(), failing, now=T0 + MINUTE)
    assert decision.phase is Phase.QUARANTINED
    assert decision.status.reservation is None


# -- the edit and the name ----------------------------------------------------------------


def test_the_reservation_replaces_the_spare_taint_in_one_edit_and_only_on_a_spare() -> None:
    reserve = a.SetTaint(
        taint=RESERVED_TAINT, value=JOB, reason="r", message="m", replaces=SPARE_TAINT
    )
    spare = node(SPARE, taints=(Taint(SPARE_TAINT, "true"),))
    edit = node_edits.plan(spare, reserve)
    assert edit is not None
    assert edit.taints == (RESERVED,)
    assert node_edits.plan(node(SPARE), reserve) is None  # released meanwhile: left alone
    assert node_edits.plan(reserved_node(), reserve) is None


def test_a_job_is_named_by_a_valid_taint_value_unique_to_it() -> None:
    assert taint_value("train", "llm") == JOB
    long = "x" * 60
    first, second = taint_value("team-a", long + "1"), taint_value("team-a", long + "2")
    label_value = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
    for value in (first, second, taint_value("ns", "Bad Name!")):
        assert len(value) <= TAINT_VALUE_MAX
        assert label_value.fullmatch(value), value
    assert first != second

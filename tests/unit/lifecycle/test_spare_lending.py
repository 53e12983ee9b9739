"""A spare no displaced job needs serves a training job's pod that waits for capacity."""

from __future__ import annotations

import dataclasses
import datetime

from pitcrew.api.gpunode import Phase, ReservationStatus
from pitcrew.api.vocabulary import RESERVED_TAINT, SPARE_TAINT
from pitcrew.core import actions as a
from pitcrew.core.fleet import after_decision, fleet_of, summarize
from pitcrew.core.lifecycle import Decision, decide
from pitcrew.core.round import Due, decide_round
from pitcrew.core.views import FleetView, NodeView, PodView, Taint
from support.lifecycle_data import T0, fleet, node, pod, policy, state, status

OLDEST, SECOND, THIRD = "gpu-node-0097", "gpu-node-0098", "gpu-node-0099"
SPARES = (OLDEST, SECOND, THIRD)
POLICY = policy(spares={"count": 3, "keepForDisplaced": 1})
SPARE_STATUS = status(Phase.SPARE, reason="HeldAsSpare")
MINUTE = datetime.timedelta(minutes=1)


def waiting(
    name: str,
    *,
    job: str = "llm",
    gpus: int = 8,
    tolerates: str = "",
    node_selector: tuple[tuple[str, str], ...] = (),
) -> PodView:
    """A training pod the scheduler found no node for (the shell hands these to spares)."""
    return dataclasses.replace(
        pod(name, job=job),
        pending=True,
        gpus=gpus,
        tolerates=tolerates,
        node_selector=node_selector,
    )


def spare_node(name: str = THIRD, *, labels: dict[str, str] | None = None) -> NodeView:
    view = node(name, taints=(Taint(SPARE_TAINT, "true"),), labels=labels)
    return dataclasses.replace(view, gpus=8)


def decided(
    pods: tuple[PodView, ...],
    *,
    name: str = THIRD,
    pool: FleetView | None = None,
    view: NodeView | None = None,
) -> Decision:
    current = dataclasses.replace(state(view or spare_node(name), SPARE_STATUS), waiting=pods)
    return decide(state=current, policy=POLICY, fleet=pool or fleet(spares=SPARES, spare=3), now=T0)


def lent_to(decision: Decision) -> list[str]:
    return [
        x.value
        for x in decision.actions
        if isinstance(x, a.SetTaint) and x.taint == RESERVED_TAINT and x.replaces == SPARE_TAINT
    ]


def test_a_spare_is_reserved_for_a_training_job_whose_pod_waits_for_capacity() -> None:
    decision = decided((waiting("trainer-3"),))
    assert lent_to(decision) == ["train.llm"]
    assert decision.phase is Phase.HEALTHY
    assert decision.status.reason == "SpareLent"
    assert decision.status.reservation == ReservationStatus(
        job="train.llm", since=T0, waiting_since=T0
    )


def test_the_oldest_spares_are_kept_for_displaced_jobs_as_the_policy_says() -> None:
    assert not lent_to(decided((waiting("trainer-3"),), name=OLDEST, view=spare_node(OLDEST)))
    kept_all = policy(spares={"count": 3, "keepForDisplaced": 3})
    current = dataclasses.replace(state(spare_node(), SPARE_STATUS), waiting=(waiting("t-0"),))
    decision = decide(state=current, policy=kept_all, fleet=fleet(spares=SPARES, spare=3), now=T0)
    assert not decision.actions
    assert decision.phase is Phase.SPARE


def test_a_pod_that_is_not_a_training_jobs_gets_no_spare() -> None:
    assert not lent_to(decided((waiting("web-0", job=""),)))


def test_a_pod_that_does_not_fit_the_spare_gets_none() -> None:
    assert not lent_to(decided((waiting("t-0", gpus=16),)))
    assert not lent_to(decided((waiting("t-0", gpus=0),)))
    elsewhere = waiting("t-0", node_selector=(("pool", "h200"),))
    assert not lent_to(decided((elsewhere,)))
    here = spare_node(labels={"pool": "h200"})
    assert lent_to(decided((elsewhere,), view=here)) == ["train.llm"]


def test_a_job_that_holds_as_many_reserved_nodes_as_it_has_pods_waiting_gets_no_more() -> None:
    holding = dataclasses.replace(fleet(spares=SPARES, spare=3), reserved={"train.llm": 1})
    assert not lent_to(decided((waiting("trainer-3"),), pool=holding))
    two_waiting = (waiting("trainer-3"), waiting("trainer-4"))
    assert lent_to(decided(two_waiting, pool=holding)) == ["train.llm"]


def test_a_pod_whose_reservation_lapsed_unclaimed_is_not_lent_another() -> None:
    lapsed = waiting("trainer-3", tolerates="train.llm")
    assert not lent_to(decided((lapsed,)))


def test_the_job_closest_to_running_is_served_first() -> None:
    pods = (
        waiting("big-0", job="big"),
        waiting("big-1", job="big"),
        waiting("small-0", job="small"),
    )
    assert lent_to(decided(pods)) == ["train.small"]


def test_spares_of_one_round_serve_each_waiting_pod_once_and_keep_the_oldest() -> None:
    pods = (waiting("a-0", job="a"), waiting("b-0", job="b"), waiting("b-1", job="b"))
    nodes = {name: spare_node(name) for name in SPARES}
    done = decide_round(
        nodes,
        read=lambda name: Due(
            state=dataclasses.replace(state(nodes[name], SPARE_STATUS), waiting=pods),
            policy=POLICY,
        ),
        fleet=lambda _: fleet(spares=SPARES, spare=3),
        now=T0,
    )
    lent = {d.node: lent_to(d.decision) for d in done.decided}
    # The oldest is kept, whichever spare decides first; the other two serve a, then b.
    assert lent == {OLDEST: [], SECOND: ["train.a"], THIRD: ["train.b"]}
    assert done.fleets["fleet"].reserved == {"train.a": 1, "train.b": 1}
    assert done.fleets["fleet"].spares == (OLDEST,)


def test_the_pool_counts_reservations_from_status_and_from_another_nodes_reserve() -> None:
    lent = decided((waiting("trainer-3"),))
    pool = fleet_of([(THIRD, summarize(lent.status)), (OLDEST, summarize(SPARE_STATUS))])
    assert pool.reserved == {"train.llm": 1}
    assert pool.spares == (OLDEST,)
    reserve = dataclasses.replace(
        lent, actions=(a.ReserveSpare(node=OLDEST, job="train.b", message="m"),)
    )
    after = after_decision(pool, node="gpu-node-0001", before=status(), decision=reserve)
    assert after.reserved == {"train.llm": 2, "train.b": 1}


def test_the_lent_spare_then_serves_as_any_reserved_node() -> None:
    lent = decided((waiting("trainer-3"),))
    reserved = node(THIRD, taints=(Taint(RESERVED_TAINT, "train.llm"),))
    current = dataclasses.replace(state(reserved, lent.status), waiting=(waiting("trainer-3"),))
    later = decide(
        state=current, policy=POLICY, fleet=fleet(spares=(OLDEST, SECOND)), now=T0 + MINUTE
    )
    assert [[p.name for p in t.pods] for t in later.actions if isinstance(t, a.Tolerate)] == [
        ["trainer-3"]
    ]
    assert later.wake_at == T0 + 5 * MINUTE  # the timeout, from when it was lent

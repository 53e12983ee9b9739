"""Properties of the decision logic over generated fleets (hypothesis).

- the breaker holds: deciding for every node of a fleet, one after the other
  as the round loop does with the production fleet arithmetic
  (:func:`pitcrew.core.fleet.after_decision`), never takes more nodes out than
  maxUnhealthy;
- decisions converge: applying each decision's node edits and status and
  deciding again at the same instant asks for nothing more within a few
  decisions (each acts only on what the one before made observable), and no
  decision both cordons and starts a rung;
- a cordon someone else made is never lifted, whatever happens to the node.
"""

from __future__ import annotations

import datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuhealth.report import FaultClass
from pitcrew.api.gpunode import Phase
from pitcrew.api.vocabulary import UNHEALTHY
from pitcrew.core import actions as a
from pitcrew.core import node_edits
from pitcrew.core.fleet import after_decision, fleet_of, summarize
from pitcrew.core.lifecycle import decide
from pitcrew.core.safety import unhealthy_limit
from pitcrew.core.views import FleetView, NodeView, PodView
from support.lifecycle_data import T0, finding, node, policy, report, state, status

CONVERGE_WITHIN = 4
"""Decisions of one instant: cordon, then drain (seen cordoned), then the rung (seen empty)."""
FAULTS = st.sampled_from([None, FaultClass.FATAL, FaultClass.DEGRADED])
LIMITS = st.one_of(
    st.integers(min_value=0, max_value=20),
    st.integers(min_value=0, max_value=100).map(lambda p: f"{p}%"),
)


def checks_for(fault: FaultClass | None):  # type: ignore[no-untyped-def]
    return report(finding(fault)) if fault else report()


def apply_node_actions(view: NodeView, actions: tuple[a.Action, ...]) -> NodeView:
    for action in actions:
        if isinstance(action, a.Cordon | a.Uncordon | a.SetTaint | a.RemoveTaint):
            edit = node_edits.plan(view, action)
            if edit is not None:
                view = node_edits.apply(view, edit)
        elif isinstance(action, a.Evict | a.ForceDelete):
            evicted = {p.key for p in action.pods}
            view = NodeView(
                name=view.name,
                created=view.created,
                labels=view.labels,
                annotations=view.annotations,
                unschedulable=view.unschedulable,
                taints=view.taints,
                pods=tuple(
                    PodView(
                        p.namespace,
                        p.name,
                        p.owner_kind,
                        terminating=p.terminating or p.key in evicted,
                    )
                    for p in view.pods
                ),
            )
    return view


@settings(max_examples=150, deadline=None)
@given(st.lists(FAULTS, min_size=1, max_size=40), LIMITS)
def test_never_more_unhealthy_than_max_unhealthy(
    faults: list[FaultClass | None], limit: int | str
) -> None:
    pol = policy(safety={"maxUnhealthy": limit})
    statuses = {f"n{i}": status(checks=checks_for(fault)) for i, fault in enumerate(faults)}
    fleet = fleet_of((name, summarize(s)) for name, s in statuses.items())
    for name, before in statuses.items():
        decision = decide(state=state(node(name), before), policy=pol, fleet=fleet, now=T0)
        fleet = after_decision(fleet, node=name, before=before, decision=decision)
    assert fleet.total == len(faults)
    assert fleet.count(*UNHEALTHY) <= unhealthy_limit(pol.spec.safety, total=len(faults))


@settings(max_examples=200, deadline=None)
@given(
    FAULTS,
    st.sampled_from(list(Phase)),
    st.integers(min_value=0, max_value=3),
    st.booleans(),
    st.integers(min_value=0, max_value=600),
)
def test_decisions_converge_and_then_ask_for_nothing_more(
    fault: FaultClass | None, phase: Phase, pods: int, foreign: bool, minutes: int
) -> None:
    now = T0 + datetime.timedelta(minutes=minutes)
    view = node(
        pods=tuple(PodView("train", f"p{i}", "Job") for i in range(pods)),
        cordoned_by="someone-else" if foreign else None,
    )
    fleet = FleetView(total=10, phases={Phase.HEALTHY: 9, phase: 1})
    first = decide(
        state=state(view, status(phase, checks=checks_for(fault))),
        policy=policy(),
        fleet=fleet,
        now=now,
    )
    decision, current = first, view
    for _ in range(CONVERGE_WITHIN):
        kinds = {type(x) for x in decision.actions}
        assert not (kinds & {a.Cordon} and kinds & {a.Remediate}), "cordon and rung together"
        current = apply_node_actions(current, decision.actions)
        decision = decide(
            state=state(current, decision.status), policy=policy(), fleet=fleet, now=now
        )
        if not [x for x in decision.actions if not isinstance(x, a.Record)]:
            break
    again = decide(state=state(current, decision.status), policy=policy(), fleet=fleet, now=now)
    assert [x for x in again.actions if not isinstance(x, a.Record)] == []
    assert again.phase is decision.phase


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(FAULTS, st.integers(min_value=1, max_value=120)), min_size=1, max_size=12)
)
def test_a_foreign_cordon_is_never_undone(history: list[tuple[FaultClass | None, int]]) -> None:
    view = node(cordoned_by="kubectl")
    current = status(Phase.HEALTHY)
    now = T0
    fleet = FleetView(total=10, phases={Phase.HEALTHY: 10})
    for fault, minutes in history:
        now += datetime.timedelta(minutes=minutes)
        current = current.model_copy(
            update={
                "checks": checks_for(fault).model_copy(update={"report_time": now}),
                "last_heartbeat": now,
            }
        )
        decision = decide(state=state(view, current), policy=policy(), fleet=fleet, now=now)
        view = apply_node_actions(view, decision.actions)
        current = decision.status
        assert view.unschedulable, f"foreign cordon lifted in {decision.phase}"

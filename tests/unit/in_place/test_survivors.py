"""Which pods of a job are asked to restart in place, and the lifecycle's asking."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from gpuhealth.report import FaultClass
from pitcrew.api.gpunode import Phase
from pitcrew.api.vocabulary import QUARANTINE_TAINT, RESTART_REQUESTED_ANNOTATION
from pitcrew.core import actions as a
from pitcrew.core.convert import pod_view
from pitcrew.core.in_place import Member, encode, member, restart_exit_code, survivors
from pitcrew.core.lifecycle import Decision, decide
from pitcrew.core.views import PodView
from support.in_place_pods import RULE, container, training_pod
from support.lifecycle_data import (
    T0,
    finding,
    fleet,
    node,
    pitcrew_cordoned,
    pod,
    policy,
    report,
    state,
    status,
)

DRAIN = T0 + datetime.timedelta(hours=1)


def chosen(*pods: dict[str, Any], taken: tuple[str, ...] = ("n0",)) -> list[str]:
    return [m.name for m in survivors([member(p) for p in pods], since=DRAIN, taken=taken)]


def test_the_exit_code_is_the_first_of_the_first_restart_all_containers_rule() -> None:
    restart = {"action": "Restart", "exitCodes": {"operator": "In", "values": [1]}}
    spec = {"initContainers": [container(RULE)], "containers": [container(restart)]}
    assert restart_exit_code(spec) == 85


def test_a_pod_without_such_a_rule_has_no_exit_code() -> None:
    not_in = {"action": "RestartAllContainers", "exitCodes": {"operator": "NotIn", "values": [0]}}
    assert restart_exit_code({"containers": [container(not_in)]}) is None
    assert restart_exit_code({"containers": [{"name": "train"}]}) is None


def test_the_survivors_elsewhere_are_asked_and_the_pod_on_the_taken_node_is_not() -> None:
    pods = [training_pod("r0", "n0"), training_pod("r1", "n1"), training_pod("r2", "n2")]
    assert chosen(*pods) == ["r1", "r2"]


def test_a_pod_that_declares_no_rule_is_left_to_its_launcher() -> None:
    assert chosen(training_pod("r1", "n1", rules=())) == []


def test_a_pod_asked_for_this_drain_is_not_asked_again() -> None:
    asked = training_pod("r1", "n1", annotations={RESTART_REQUESTED_ANNOTATION: encode(DRAIN)})
    assert chosen(asked) == []


def test_a_pod_asked_for_an_earlier_drain_is_asked_for_this_one() -> None:
    earlier = encode(DRAIN - datetime.timedelta(minutes=30))
    assert chosen(training_pod("r1", "n1", annotations={RESTART_REQUESTED_ANNOTATION: earlier}))


def test_a_pod_restarted_since_the_drain_began_is_not_asked() -> None:
    restarted = training_pod("r1", "n1", started=DRAIN + datetime.timedelta(seconds=20))
    assert chosen(restarted) == []


def test_pods_not_running_or_on_another_taken_node_are_not_asked() -> None:
    pending = training_pod("r1", "n1")
    pending["status"]["phase"] = "Pending"
    deleting = training_pod("r2", "n2")
    deleting["metadata"]["deletionTimestamp"] = DRAIN.isoformat()
    assert chosen(pending, deleting, training_pod("r3", "n3"), taken=("n0", "n3")) == []


def test_the_request_reads_back_as_the_drain_it_names() -> None:
    asked = member(
        training_pod("r1", "n1", annotations={RESTART_REQUESTED_ANNOTATION: encode(DRAIN)})
    )
    assert isinstance(asked, Member)
    assert asked.requested == DRAIN


def test_the_pod_view_says_whether_a_training_pod_restarts_in_place() -> None:
    assert pod_view(training_pod("r1", "n1")).restarts_in_place
    assert not pod_view(training_pod("r1", "n1", rules=())).restarts_in_place


# -- the lifecycle asks, with the node's eviction ------------------------------------------


def in_place(name: str) -> PodView:
    return dataclasses.replace(pod(name), restarts_in_place=True)


def drained(*pods: PodView) -> Decision:
    view = pitcrew_cordoned(node(pods=pods), QUARANTINE_TAINT)
    current = status(Phase.QUARANTINED, checks=report(finding(FaultClass.FATAL)))
    return decide(state=state(view, current), policy=policy(), fleet=fleet(), now=DRAIN)


def test_a_drain_asks_once_per_job_before_its_pods_are_evicted() -> None:
    decision = drained(in_place("trainer-0"), in_place("trainer-1"), pod("web-0", job=""))
    kinds = [type(x) for x in decision.actions if isinstance(x, a.RestartInPlace | a.Evict)]
    assert kinds == [a.RestartInPlace, a.Evict]
    (asked,) = [x for x in decision.actions if isinstance(x, a.RestartInPlace)]
    assert (asked.namespace, asked.job, asked.since) == ("train", "llm", DRAIN)


def test_the_request_names_the_drain_each_time_it_is_decided() -> None:
    first = drained(in_place("trainer-0"))
    again = decide(
        state=state(
            pitcrew_cordoned(node(pods=(in_place("trainer-0"),)), QUARANTINE_TAINT),
            first.status,
        ),
        policy=policy(),
        fleet=fleet(),
        now=DRAIN + datetime.timedelta(seconds=30),
    )
    asked = [x.since for x in (*first.actions, *again.actions) if isinstance(x, a.RestartInPlace)]
    assert asked == [DRAIN, DRAIN]


def test_a_job_whose_pods_declare_no_rule_is_not_asked_for() -> None:
    decision = drained(pod("trainer-0"))
    assert not [x for x in decision.actions if isinstance(x, a.RestartInPlace)]
    assert [x for x in decision.actions if isinstance(x, a.Evict)]

"""A pool's count kept one change at a time is the count of its members walked whole."""

from __future__ import annotations

import datetime

from hypothesis import given
from hypothesis import strategies as st

from pitcrew.api.gpunode import Phase
from pitcrew.core.fleet import Summary, Tally, fleet_of
from pitcrew.core.round import member
from support.lifecycle_data import T0
from support.shell_fakes import HeldPool, Shell, healthy_status, node_object, policy_object

summaries = st.builds(
    Summary,
    phase=st.sampled_from(list(Phase)),
    refused=st.booleans(),
    since=st.sampled_from([None, T0, T0 + datetime.timedelta(hours=1)]),
    heartbeat=st.none(),
    verifying=st.booleans(),
    leaving_for_maintenance=st.booleans(),
    history=st.just(()),
    reason=st.just(""),
    reservation=st.sampled_from(["", "team/a", "team/b"]),
)
changes = st.lists(
    st.tuples(st.sampled_from([f"n{i}" for i in range(6)]), st.none() | summaries), max_size=40
)


@given(changes)
def test_a_tally_is_fleet_of_its_members_after_any_changes(
    steps: list[tuple[str, Summary | None]],
) -> None:
    tally = Tally()
    members: dict[str, Summary] = {}
    for name, summary in steps:
        tally.set(name, summary)
        if summary is None:
            members.pop(name, None)
        else:
            members[name] = summary
        assert tally.view() == fleet_of(members.items())


def test_the_round_loops_fleet_is_the_walk_of_every_member_with_plans_in_flight() -> None:
    """What the loop keeps as nodes fail, plans fly and land, a node leaves the policy
    and another the cluster, equals the pool walked whole as it was before the tally."""
    pool = HeldPool()
    names = [f"n{i}" for i in range(8)]
    shell = Shell(nodes={n: healthy_status() for n in names}, policy=policy_object(), pool=pool)
    shell.settle()
    loop, store = shell.rounds, shell.store

    def walked() -> object:
        return fleet_of(
            (n, member(store.summary(n), loop.intended.get(n)))
            for n in store.nodes
            if store.policies_of(n) == ("fleet",)
        )

    assert loop.fleet("fleet") == walked()
    for name in ("n1", "n4"):
        shell.fail(name)
    shell.round()
    assert loop.intended  # plans in flight
    assert loop.fleet("fleet") == walked()
    pool.release()
    assert not loop.intended
    assert loop.fleet("fleet") == walked()
    assert loop.fleet("fleet").count(Phase.HEALTHY) < len(names)
    relabelled = node_object("n2")
    relabelled["metadata"]["labels"] = {"pool": "other"}
    store.put("node", relabelled)
    store.put("node", store.nodes["n5"], deleted=True)
    assert loop.fleet("fleet") == walked()
    assert loop.fleet("fleet").total == len(names) - 2

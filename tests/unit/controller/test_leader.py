"""Pitcrew's elector against an in-memory Lease API that guards writes by
resourceVersion as the apiserver does: one holder of a shard at a time, a take-over
only after the Lease stood still for its duration, a lost Lease stops acting at
once, two replicas split the shards, and an election that ends ends the process."""

from __future__ import annotations

import copy
import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from pitcrew.api.vocabulary import ELECTION_LABEL
from pitcrew.controller import leader
from pitcrew.controller.leader import (
    EXIT_ELECTION_ENDED,
    STALE_MEMBER,
    Elector,
    run_until_it_ends,
)
from pitcrew.core.lease import Timing, member_lease, pool_lease
from pitcrew.kube import leases
from pitcrew.kube.client import api_client

NAMESPACE = "pitcrew-system"
LEASE = "pitcrew-operator"
TIMING = Timing(4)  # renew deadline 2 s, retry 1 s


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Apiserver:
    """Leases by name; a write must carry the resourceVersion it read."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.away = False
        self.writes = 0
        self.reads = 0

    def _stored(self, lease: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        self.writes += 1
        stored = copy.deepcopy(lease)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.leases[lease["metadata"]["name"]] = stored
        return copy.deepcopy(stored)

    def _reach(self) -> None:
        if self.away:
            raise ConnectionRefusedError("apiserver restarting")

    def read(self, api: object, namespace: str, name: str, *, timeout: float) -> Any:
        self._reach()
        self.reads += 1
        found = self.leases.get(name)
        return copy.deepcopy(found) if found else None

    def listed(
        self, api: object, namespace: str, election: str, *, timeout: float
    ) -> list[dict[str, Any]]:
        self._reach()
        self.reads += 1
        return [
            copy.deepcopy(lease)
            for lease in self.leases.values()
            if lease["metadata"].get("labels", {}).get(ELECTION_LABEL) == election
        ]

    def delete(self, api: object, lease: dict[str, Any], *, timeout: float) -> None:
        self._reach()
        name = lease["metadata"]["name"]
        if self.leases[name]["metadata"]["resourceVersion"] != lease["metadata"]["resourceVersion"]:
            raise client.ApiException(status=409, reason="Conflict")
        del self.leases[name]

    def create(self, api: object, lease: dict[str, Any], *, timeout: float) -> dict[str, Any]:
        self._reach()
        if lease["metadata"]["name"] in self.leases:
            raise client.ApiException(status=409, reason="AlreadyExists")
        return self._stored(lease)

    def replace(self, api: object, lease: dict[str, Any], *, timeout: float) -> dict[str, Any]:
        self._reach()
        current = self.leases[lease["metadata"]["name"]]
        if lease["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise client.ApiException(status=409, reason="Conflict")
        return self._stored(lease)

    def holder(self, name: str = LEASE) -> str:
        return str(self.leases[name]["spec"]["holderIdentity"])


@pytest.fixture
def apiserver(monkeypatch: pytest.MonkeyPatch) -> Apiserver:
    server = Apiserver()
    for call in ("listed", "read", "create", "replace", "delete"):
        monkeypatch.setattr(leader.leases, call, getattr(server, call))
    return server


def candidate(
    identity: str, clock: Clock, events: list[str] | None = None, pools: tuple[str, ...] = ()
) -> Elector:
    said = events if events is not None else []
    elector = Elector(
        client.ApiClient(),
        namespace=NAMESPACE,
        cluster=LEASE,
        identity=identity,
        timing=TIMING,
        won=lambda name, _: said.append(f"{identity} won {name}"),
        lost=lambda name: said.append(f"{identity} lost {name}"),
        clock=clock,
        wall=lambda: datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    )
    elector.campaign(pools)
    return elector


def test_the_first_candidate_creates_the_lease_and_the_second_waits(apiserver: Apiserver) -> None:
    clock = Clock()
    a, b = candidate("a", clock), candidate("b", clock)
    a.turn()
    b.turn()
    assert apiserver.holder() == "a"
    assert a.leads(LEASE)
    assert not b.leads(LEASE)


def test_the_cluster_leases_holder_says_it_is_the_leader_and_a_pools_holder_says_which(
    apiserver: Apiserver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger=leader.__name__)
    candidate("a", Clock(), pools=("train",)).turn()
    said = [r.getMessage() for r in caplog.records]
    assert f"a is the leader, holding the Lease {NAMESPACE}/{LEASE}" in said
    assert f"a holds the Lease {NAMESPACE}/{pool_lease(LEASE, 'train')}" in said
    assert sum("is the leader" in line for line in said) == 1


def test_a_turn_is_one_read_of_the_election_and_one_write_per_lease_held(
    apiserver: Apiserver,
) -> None:
    clock = Clock()
    a = candidate("a", clock, pools=("p1", "p2"))
    a.turn()
    reads, writes = apiserver.reads, apiserver.writes
    for _ in range(5):
        clock.now += TIMING.retry
        a.turn()
    assert apiserver.reads == reads + 5
    assert apiserver.writes == writes + 5 * 4  # its member Lease, the cluster's, two pools'
    assert a.leads(LEASE)


def test_a_candidate_takes_over_only_after_the_lease_stood_still_for_its_duration(
    apiserver: Apiserver,
) -> None:
    clock = Clock()
    events: list[str] = []
    a, b = candidate("a", clock, events), candidate("b", clock, events)
    a.turn()
    b.turn()  # b sees the Lease at 100
    # a dies: no more renewals.
    clock.now = 103.0
    b.turn()
    assert apiserver.holder() == "a"
    assert not a.leads(LEASE)  # a's own tenure ran out at 102, before b may take it
    clock.now = 104.0
    b.turn()
    assert apiserver.holder() == "b"
    assert b.leads(LEASE)
    assert apiserver.leases[LEASE]["spec"]["leaseTransitions"] == 1
    assert events == ["a won pitcrew-operator", "b won pitcrew-operator"]


def test_a_holder_that_finds_another_holder_stops_acting_at_once(apiserver: Apiserver) -> None:
    clock = Clock()
    events: list[str] = []
    a = candidate("a", clock, events)
    a.turn()
    taken = copy.deepcopy(apiserver.leases[LEASE])
    taken["spec"]["holderIdentity"] = "intruder"
    apiserver.replace(None, taken, timeout=1)
    clock.now += 0.5  # well within a's tenure
    a.turn()  # its renewal answers 409; the read says who holds it
    assert not a.leads(LEASE)
    assert events == ["a won pitcrew-operator", "a lost pitcrew-operator"]
    assert apiserver.holder() == "intruder"


def test_transient_errors_are_retried_until_the_renew_deadline(apiserver: Apiserver) -> None:
    clock = Clock()
    events: list[str] = []
    a = candidate("a", clock, events)
    a.turn()
    apiserver.away = True
    clock.now = 101.0
    a.turn()
    assert a.leads(LEASE)  # one failed renewal: still within the deadline
    apiserver.away = False
    a.turn()
    assert a.leads(LEASE)
    apiserver.away = True
    clock.now = 103.1
    a.turn()
    assert not a.leads(LEASE)
    assert events == ["a won pitcrew-operator", "a lost pitcrew-operator"]
    apiserver.away = False
    clock.now = 104.0
    a.turn()  # no one took it meanwhile: the Lease still names a, which renews it
    assert a.leads(LEASE)


def test_a_lease_given_back_is_taken_at_once(apiserver: Apiserver) -> None:
    clock = Clock()
    a, b = candidate("a", clock), candidate("b", clock)
    a.turn()
    b.turn()
    a.release()
    assert not a.leads(LEASE)
    assert a.stopped()
    b.turn()
    assert apiserver.holder() == "b"


def test_two_candidates_never_act_at_once(apiserver: Apiserver) -> None:
    """Turns of two candidates interleaved at odd instants, one of them cut off from
    the apiserver now and then: at no instant do both lead."""
    clock = Clock()
    events: list[str] = []
    a, b = candidate("a", clock, events), candidate("b", clock, events)
    for tick in range(400):
        clock.now = 100.0 + tick * 0.37
        turns = [a, b] if tick % 2 else [b, a][: 1 + (tick % 3 == 0)]
        for elector in turns:
            # Now one, now the other, is cut off from the apiserver for seconds.
            apiserver.away = (tick // 25) % 2 == 1 and elector is (a if tick // 50 % 2 else b)
            elector.turn()
            assert not (a.leads(LEASE) and b.leads(LEASE)), tick
        apiserver.away = False
    assert {"a won pitcrew-operator", "b won pitcrew-operator"} <= set(events)  # hand-overs


def test_the_lease_body_keeps_acquire_time_on_renewal_and_counts_a_take_over() -> None:
    first = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    later = first + datetime.timedelta(seconds=3)
    made = leases.held(
        namespace=NAMESPACE, name=LEASE, identity="a", seconds=4, now=first, election=LEASE
    )
    made["metadata"]["resourceVersion"] = "7"
    renewed = leases.held(
        namespace=NAMESPACE,
        name=LEASE,
        identity="a",
        seconds=4,
        now=later,
        election=LEASE,
        before=made,
    )
    assert renewed["spec"]["acquireTime"] == "2026-01-01T00:00:00.000000Z"
    assert renewed["spec"]["renewTime"] == "2026-01-01T00:00:03.000000Z"
    assert renewed["metadata"]["resourceVersion"] == "7"
    assert renewed["spec"]["leaseTransitions"] == 0
    taken = leases.held(
        namespace=NAMESPACE,
        name=LEASE,
        identity="b",
        seconds=4,
        now=later,
        election=LEASE,
        before=made,
    )
    assert taken["spec"]["leaseTransitions"] == 1
    assert taken["spec"]["acquireTime"] == "2026-01-01T00:00:03.000000Z"
    assert taken["metadata"]["labels"] == {ELECTION_LABEL: LEASE}


@pytest.mark.parametrize("outcome", ["returns", "raises"])
def test_the_process_exits_whenever_the_election_ends(outcome: str) -> None:
    exits: list[int] = []

    def election() -> None:
        if outcome == "raises":
            raise OSError("connection reset")

    run_until_it_ends(election, exit=exits.append)
    assert exits == [EXIT_ELECTION_ENDED]


def test_an_election_stopped_on_purpose_does_not_end_the_process() -> None:
    exits: list[int] = []
    run_until_it_ends(lambda: None, stopped=lambda: True, exit=exits.append)
    assert exits == []


def test_every_request_of_pitcrews_clients_has_a_deadline(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    api = api_client(str(kubeconfig))
    timeout = api.rest_client.pool_manager.connection_pool_kw["timeout"]
    assert timeout.connect_timeout == 10.0
    assert timeout.read_timeout == 60.0


def settle(electors: list[Elector], clock: Clock, turns: int) -> None:
    for _ in range(turns):
        clock.now += TIMING.retry
        for elector in electors:
            elector.turn()


POOLS = ("pool-a", "pool-b")
SHARDS = [LEASE, pool_lease(LEASE, "pool-a"), pool_lease(LEASE, "pool-b")]


def test_two_replicas_split_the_shards_though_one_took_them_all_first(
    apiserver: Apiserver,
) -> None:
    clock = Clock()
    events: list[str] = []
    a = candidate("a", clock, events, POOLS)
    a.turn()
    assert all(a.leads(name) for name in SHARDS)  # alone: all three
    b = candidate("b", clock, events, POOLS)
    settle([a, b], clock, turns=4)
    led = {name: [e.identity for e in (a, b) if e.leads(name)] for name in SHARDS}
    assert all(len(holders) == 1 for holders in led.values()), led
    assert a.leads(LEASE)  # the cluster shard stays where it is
    assert a.leads(SHARDS[1]) != b.leads(SHARDS[1])  # a pool each
    assert a.leads(SHARDS[2]) != b.leads(SHARDS[2])
    assert b.leads(SHARDS[1]) or b.leads(SHARDS[2])
    assert f"a lost {pool_lease(LEASE, 'pool-b')}" in events
    assert f"b won {pool_lease(LEASE, 'pool-b')}" in events


def test_a_dead_replicas_shards_are_taken_over_within_the_lease_and_a_retry(
    apiserver: Apiserver,
) -> None:
    clock = Clock()
    a, b = candidate("a", clock, pools=POOLS), candidate("b", clock, pools=POOLS)
    a.turn()
    settle([a, b], clock, turns=4)
    theirs = [name for name in SHARDS if a.leads(name)]
    mine = [name for name in SHARDS if b.leads(name)]
    died = clock.now  # a's last renewal
    while not all(b.leads(name) for name in theirs):
        clock.now += TIMING.retry
        b.turn()
        assert all(b.leads(name) for name in mine)  # b's own pool never stopped
    assert clock.now - died <= TIMING.lease + TIMING.retry
    assert not any(a.leads(name) for name in SHARDS)


def test_the_lease_of_a_pool_gone_is_given_back(apiserver: Apiserver) -> None:
    clock = Clock()
    events: list[str] = []
    a = candidate("a", clock, events, POOLS)
    a.turn()
    a.campaign(["pool-a"])
    a.turn()
    gone = pool_lease(LEASE, "pool-b")
    assert not a.leads(gone)
    assert apiserver.holder(gone) == ""
    assert events[-1] == f"a lost {gone}"


def test_the_member_lease_of_a_replica_long_gone_is_deleted(apiserver: Apiserver) -> None:
    clock = Clock()
    a, b = candidate("a", clock), candidate("b", clock)
    a.turn()
    b.turn()
    assert member_lease(LEASE, "b") in apiserver.leases
    settle([a], clock, turns=int(STALE_MEMBER * TIMING.lease / TIMING.retry) + 6)
    assert member_lease(LEASE, "b") not in apiserver.leases
    assert member_lease(LEASE, "a") in apiserver.leases


def test_no_shard_ever_has_two_replicas_acting(apiserver: Apiserver) -> None:
    """Three replicas, three pools, turns at odd instants, one replica cut off from
    the apiserver now and then: no shard is led by two at once, and every shard is
    led again after each cut."""
    clock = Clock()
    electors = [candidate(name, clock, pools=("p1", "p2", "p3")) for name in "abc"]
    shards = [LEASE, *(pool_lease(LEASE, p) for p in ("p1", "p2", "p3"))]
    for tick in range(600):
        clock.now = 100.0 + tick * 0.29
        cut = electors[(tick // 60) % 3] if (tick // 30) % 2 else None
        for elector in electors[tick % 3 :] + electors[: tick % 3]:
            apiserver.away = elector is cut
            elector.turn()
            apiserver.away = False
            for name in shards:
                assert sum(e.leads(name) for e in electors) <= 1, (tick, name)
    assert all(any(e.leads(name) for e in electors) for name in shards)


def test_a_replica_counts_as_a_member_only_once_it_knows_the_pools(
    apiserver: Apiserver,
) -> None:
    """A replica still listing the cluster would be given a pool it cannot take yet:
    it says it is there only from its first campaign on."""
    clock = Clock()
    a = candidate("a", clock, pools=POOLS)
    a.turn()
    starting = Elector(
        client.ApiClient(),
        namespace=NAMESPACE,
        cluster=LEASE,
        identity="b",
        timing=TIMING,
        clock=clock,
        wall=lambda: datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    )
    settle([a, starting], clock, turns=4)
    assert member_lease(LEASE, "b") not in apiserver.leases
    assert all(a.leads(name) for name in SHARDS[1:])  # nothing given back meanwhile
    starting.campaign(POOLS)
    settle([a, starting], clock, turns=4)
    assert sum(starting.leads(name) for name in SHARDS[1:]) == 1

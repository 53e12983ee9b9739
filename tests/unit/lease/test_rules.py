"""The Lease rules: when a Lease may be taken, when its holder renews, when its tenure ends."""

from __future__ import annotations

from pitcrew.core.lease import (
    ABSENT,
    Record,
    Seen,
    Step,
    Tenure,
    Timing,
    fair_share,
    free,
    pool_lease,
    seen,
    step,
    surplus,
)

HELD = Record(holder="a", duration=4.0, transitions=0, version="1")


def test_the_periods_follow_the_lease_duration() -> None:
    assert (Timing(15).renew_deadline, Timing(15).retry) == (10.0, 3.0)
    assert (Timing(4).renew_deadline, Timing(4).retry) == (2.0, 1.0)
    assert (Timing(3).renew_deadline, Timing(3).retry) == (2.0, 1.0)


def test_a_lease_is_free_once_unchanged_for_its_duration_on_the_candidates_clock() -> None:
    lease = seen(None, HELD, 100.0)
    assert not free(lease, 103.9)
    assert free(lease, 104.0)


def test_a_renewal_starts_the_wait_again() -> None:
    lease = seen(None, HELD, 100.0)
    assert seen(lease, HELD, 103.0) is lease  # unchanged: still seen since 100
    renewed = seen(lease, Record(holder="a", duration=4.0, transitions=0, version="2"), 103.0)
    assert renewed.since == 103.0
    assert not free(renewed, 106.0)


def test_a_lease_given_back_is_free_at_once() -> None:
    given_back = Seen(Record(holder="", duration=1.0, transitions=1, version="5"), since=100.0)
    assert free(given_back, 100.0)


def test_the_take_over_rule() -> None:
    lease = seen(None, HELD, 100.0)
    rule = {"under_share": True, "patience": 4.0}
    assert step(seen(None, ABSENT, 100.0), identity="b", now=100.0, **rule) is Step.CREATE
    assert step(lease, identity="a", now=100.0, **rule) is Step.RENEW  # its own, restarted too
    assert step(lease, identity="b", now=101.0, **rule) is Step.WAIT
    assert step(lease, identity="b", now=104.0, **rule) is Step.TAKE


def test_a_replica_at_its_share_leaves_a_free_shard_to_the_others_for_a_while() -> None:
    lease = seen(None, HELD, 100.0)  # free from 104
    rule = {"under_share": False, "patience": 4.0}
    assert step(lease, identity="b", now=104.0, **rule) is Step.WAIT
    assert step(lease, identity="b", now=108.0, **rule) is Step.TAKE  # no one took it
    assert step(seen(None, ABSENT, 100.0), identity="b", now=100.0, **rule) is Step.WAIT


def test_the_fair_share_leaves_every_shard_a_place() -> None:
    assert fair_share(3, 2) == 2
    assert fair_share(2, 2) == 1
    assert fair_share(5, 1) == 5
    assert fair_share(1, 3) == 1
    assert fair_share(4, 0) == 4  # no member seen yet, itself included


def test_a_replica_over_its_share_gives_back_one_pool_a_turn() -> None:
    held = ["pitcrew-operator-pool-a", "pitcrew-operator-pool-b", "pitcrew-operator-pool-c"]
    assert surplus(held, fair=2, others_under=True) == held[2]
    assert surplus(held, fair=2, others_under=False) is None  # no one would take it
    assert surplus(held[:2], fair=2, others_under=True) is None


def test_a_pool_lease_name_stays_a_valid_name() -> None:
    assert pool_lease("pitcrew-operator", "a") == "pitcrew-operator-pool-a"
    assert len(pool_lease("pitcrew-operator", "x" * 253)) == 253


def test_the_tenure_runs_from_when_the_last_good_renewal_was_sent() -> None:
    """A renewal sent at 100 s that answers at 101.5 s buys acting until 102 s (the
    renew deadline after it was sent), never 2 s after the answer: a candidate may take
    the Lease 4 s after the renewal landed."""
    tenure = Tenure(2.0)
    assert not tenure.valid(100.0)  # no renewal yet
    tenure.renewed(100.0)
    assert tenure.valid(101.5)
    assert not tenure.valid(102.0)
    tenure.renewed(99.0)  # an older renewal answering late does not extend it
    assert not tenure.valid(102.0)


def test_a_tenure_ended_is_over_at_once() -> None:
    tenure = Tenure(2.0)
    tenure.renewed(100.0)
    tenure.end()
    assert not tenure.valid(100.5)

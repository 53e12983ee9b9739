"""The Lease rules: when a Lease may be taken, when its holder renews, when its tenure ends."""

from __future__ import annotations

from pitcrew.core.lease import Record, Seen, Step, Tenure, Timing, free, seen, step

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
    assert step(None, identity="b", now=100.0) is Step.CREATE
    assert step(lease, identity="a", now=100.0) is Step.RENEW  # its own, even after a restart
    assert step(lease, identity="b", now=101.0) is Step.WAIT
    assert step(lease, identity="b", now=104.0) is Step.TAKE


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

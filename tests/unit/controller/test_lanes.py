"""The executor's two lanes: a cordon goes before any follow-up write."""

from __future__ import annotations

import threading

from pitcrew.controller.lanes import Lanes
from pitcrew.core import actions as a

CORDON = a.Cordon(taint="pitcrew.dev/quarantined", value="Xid", reason="Xid", message="cordoned")
SAID = a.Record(reason="Xid", message="Healthy -> Quarantined")
EVICT = a.Evict(pods=(), reason="Xid", message="drain")
WAIT = 10.0


def test_a_plans_cordon_is_split_off_and_the_rest_keeps_its_order() -> None:
    first, rest = a.cordon_first((SAID, CORDON, EVICT))
    assert first == (CORDON,)
    assert rest == (SAID, EVICT)


def test_a_plan_without_a_cordon_is_all_rest() -> None:
    assert a.cordon_first((SAID, EVICT)) == ((), (SAID, EVICT))


def test_a_cordon_queued_behind_follow_ups_runs_before_them() -> None:
    lanes = Lanes(1)
    gate = threading.Event()
    ran: list[str] = []
    lanes.submit(gate.wait, WAIT)  # the one worker is busy
    later = [lanes.submit(ran.append, f"status-{n}") for n in range(3)]
    cordon = lanes.submit_first(ran.append, "cordon")
    gate.set()
    for future in (cordon, *later):
        future.result(WAIT)
    assert ran == ["cordon", "status-0", "status-1", "status-2"]


def test_no_follow_up_starts_while_a_cordon_runs() -> None:
    lanes = Lanes(8)
    cordon_running, cordon_may_end = threading.Event(), threading.Event()

    def cordon() -> None:
        cordon_running.set()
        cordon_may_end.wait(WAIT)

    first = lanes.submit_first(cordon)
    assert cordon_running.wait(WAIT)
    follow_up = lanes.submit(lambda: "status written")
    lanes.wait_first(0.2)  # seven workers are free, and the follow-up still waits
    assert not follow_up.done()
    cordon_may_end.set()
    first.result(WAIT)
    assert follow_up.result(WAIT) == "status written"


def test_some_workers_stay_free_for_cordons_while_follow_ups_take_long() -> None:
    lanes = Lanes(6)
    release = threading.Event()
    slow = [lanes.submit(release.wait, WAIT) for _ in range(6)]  # slow drains
    assert lanes.submit_first(lambda: "cordoned").result(WAIT) == "cordoned"
    release.set()
    assert all(f.result(WAIT) for f in slow)


def test_an_error_reaches_whoever_waits_on_the_work() -> None:
    lanes = Lanes(2)

    def fails() -> None:
        raise RuntimeError("apiserver gone")

    error = lanes.submit_first(fails).exception(WAIT)
    assert isinstance(error, RuntimeError)
    assert lanes.submit(lambda: 1).result(WAIT) == 1  # the worker lives on

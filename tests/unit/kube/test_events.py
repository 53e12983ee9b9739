"""Events of a burst, aggregated: one write per object and reason, with a count."""

from __future__ import annotations

import datetime

from pitcrew.kube.events import Emitted, aggregate, node_ref

T0 = datetime.datetime(2026, 12, 6, tzinfo=datetime.UTC)
SECOND = datetime.timedelta(seconds=1)
N1, N2 = node_ref("n1", "u1"), node_ref("n2", "u2")
CORDONED = "cordoned and tainted pitcrew.dev/quarantined=Xid"
TAKEN_OUT = "Healthy -> Quarantined: Xid 79 on GPU 0"


def test_a_nodes_cordon_and_transition_of_one_reason_are_one_event_with_a_count_of_two() -> None:
    (said,) = aggregate(
        [Emitted(N1, "Xid", CORDONED, False, T0), Emitted(N1, "Xid", TAKEN_OUT, True, T0 + SECOND)]
    )
    assert (said.ref, said.reason, said.count) == (N1, "Xid", 2)
    assert said.message == f"{CORDONED}; {TAKEN_OUT}"
    assert said.warning  # one of them was
    assert (said.first, said.at) == (T0, T0 + SECOND)


def test_a_burst_is_one_event_per_node_and_reason_in_the_order_first_emitted() -> None:
    batch = [
        Emitted(N1, "Xid", CORDONED, False, T0),
        Emitted(N2, "Xid", CORDONED, False, T0),
        Emitted(N1, "SpareReserved", "spare n9 reserved", False, T0),
        Emitted(N2, "Xid", TAKEN_OUT, False, T0),
        Emitted(N1, "Xid", TAKEN_OUT, False, T0),
    ]
    said = aggregate(batch)
    assert [(s.ref.name, s.reason, s.count) for s in said] == [
        ("n1", "Xid", 2),
        ("n2", "Xid", 2),
        ("n1", "SpareReserved", 1),
    ]


def test_the_same_message_twice_is_said_once_and_counted_twice() -> None:
    (said,) = aggregate([Emitted(N1, "Evicted", "evicted 1 pods: a/b", False, T0)] * 2)
    assert (said.message, said.count) == ("evicted 1 pods: a/b", 2)

"""The policy-status writer: fleet counts, breaker Events once, no idle rewrites."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import REGISTRY

from pitcrew.api.gpunode import Phase
from pitcrew.api.meta import Duration
from pitcrew.controller.policy_status import WRITE_EVERY, PolicyStatusWriter
from pitcrew.core.views import FleetView
from support.lifecycle_data import T0
from support.shell_fakes import HeldPool, Shell, healthy_status, policy_object

POLICY = policy_object(safety={"maxUnhealthy": 1, "stormCooldown": "10m"})


def writer_shell() -> Shell:
    return Shell(nodes={"n0": healthy_status()}, policy=POLICY)


def test_the_breaker_opens_once_and_closing_starts_the_cooldown() -> None:
    shell = writer_shell()
    refusing = FleetView(total=10, phases={Phase.HEALTHY: 9, Phase.DRAINING: 1}, refused=2)
    shell.policy_status.write("fleet", refusing, T0)
    shell.policy_status.write("fleet", refusing, T0 + datetime.timedelta(seconds=30))
    assert shell.events.reasons("GPUHealthPolicy") == ["CircuitBreakerOpen"]
    opened = shell.cluster.policy_statuses["fleet"][0]
    assert opened["breaker"]["open"] is True
    assert opened["breaker"]["since"] == T0.isoformat()
    assert "2 failing nodes kept in service" in opened["breaker"]["message"]
    assert opened["unhealthy"] == 1

    quiet = FleetView(total=10, phases={Phase.HEALTHY: 10})
    closed_at = T0 + datetime.timedelta(minutes=5)
    shell.policy_status.write("fleet", quiet, closed_at)
    assert shell.events.reasons("GPUHealthPolicy") == ["CircuitBreakerOpen", "CircuitBreakerClosed"]
    closed = shell.cluster.policy_statuses["fleet"][-1]
    assert closed["breaker"] == {"open": False}
    assert closed["cooldownUntil"] == (closed_at + datetime.timedelta(minutes=10)).isoformat()


def test_the_since_of_an_open_breaker_survives_rounds() -> None:
    shell = writer_shell()
    refusing = FleetView(total=10, phases={Phase.DRAINING: 1, Phase.HEALTHY: 9}, refused=1)
    shell.policy_status.write("fleet", refusing, T0)
    more = FleetView(total=10, phases={Phase.DRAINING: 1, Phase.HEALTHY: 9}, refused=3)
    shell.policy_status.write("fleet", more, T0 + datetime.timedelta(minutes=1))
    latest = shell.cluster.policy_statuses["fleet"][-1]
    assert latest["breaker"]["since"] == T0.isoformat()
    assert "3 failing nodes" in latest["breaker"]["message"]


def test_a_fleet_at_its_limit_without_refusals_is_not_open() -> None:
    shell = writer_shell()
    at_limit = FleetView(total=10, phases={Phase.HEALTHY: 9, Phase.QUARANTINED: 1})
    shell.policy_status.write("fleet", at_limit, T0)
    assert shell.cluster.policy_statuses["fleet"][-1]["breaker"] == {"open": False}
    assert shell.events.posted == []


def test_an_unchanged_status_is_not_written_again() -> None:
    shell = writer_shell()
    fleet = FleetView(total=1, phases={Phase.HEALTHY: 1})
    shell.policy_status.write("fleet", fleet, T0)
    shell.policy_status.write("fleet", fleet, T0 + datetime.timedelta(minutes=1))
    assert len(shell.cluster.policy_statuses["fleet"]) == 1


def test_a_deleted_policy_is_not_written() -> None:
    shell = writer_shell()
    shell.store.put("policy", shell.store.policies["fleet"], deleted=True)
    shell.policy_status.write("fleet", FleetView(total=0, phases={}), T0)
    assert shell.cluster.calls == []


def test_goodput_is_reported_per_window_against_the_target_and_exported() -> None:
    policy = policy_object(goodput={"target": 0.99, "windows": ["15m", "6h"]})
    shell = Shell(nodes={"n0": healthy_status()}, policy=policy)
    asked: list[tuple[str, list[str]]] = []

    def goodput(pool: str, windows: Sequence[Duration], now: datetime.datetime) -> Any:
        asked.append((pool, [str(w) for w in windows]))
        return [{"window": "15m", "ratio": 0.995}, {"window": "6h", "ratio": 0.97}]

    shell.policy_status.goodput = goodput
    shell.policy_status.write("fleet", FleetView(total=1, phases={Phase.HEALTHY: 1}), T0)
    assert asked == [("fleet", ["15m", "6h"])]
    written = shell.cluster.policy_statuses["fleet"][-1]["goodput"]
    assert written == {
        "target": 0.99,
        "windows": [{"window": "15m", "ratio": 0.995}, {"window": "6h", "ratio": 0.97}],
    }
    target = REGISTRY.get_sample_value("pitcrew_goodput_target_ratio", {"pool": "fleet"})
    assert target == 0.99


class Clock:
    """Monotonic seconds that only the test moves, and the delayed calls asked for."""

    def __init__(self) -> None:
        self.seconds = 100.0
        self.waits: list[float] = []
        self.due: list[Callable[[], None]] = []

    def later(self, seconds: float, fn: Callable[[], None]) -> None:
        self.waits.append(round(seconds, 3))
        self.due.append(fn)

    def run_due(self) -> None:
        due, self.due = self.due, []
        for fn in due:
            fn()


def held_writer(shell: Shell, clock: Clock | None = None) -> tuple[PolicyStatusWriter, HeldPool]:
    pool = HeldPool()
    clock = clock or Clock()
    writer = PolicyStatusWriter(
        cluster=shell.cluster,
        store=shell.store,
        events=shell.events,
        goodput=lambda pool, windows, now: [],
        pool=pool,
        later=clock.later,
        monotonic=lambda: clock.seconds,
    )
    return writer, pool


def test_fleets_submitted_while_a_write_waits_become_one_write_of_the_latest() -> None:
    shell = writer_shell()
    writer, pool = held_writer(shell)
    for draining in range(1, 6):  # five rounds of a drain while the writer is busy
        phases = {Phase.HEALTHY: 10 - draining, Phase.DRAINING: draining}
        writer.submit("fleet", FleetView(total=10, phases=phases), T0)
    pool.release()
    written = shell.cluster.policy_statuses["fleet"]
    assert [w["unhealthy"] for w in written] == [5]


def test_a_breaker_opening_and_closing_are_never_merged_into_one_write() -> None:
    shell = writer_shell()
    writer, pool = held_writer(shell)
    quiet = FleetView(total=10, phases={Phase.HEALTHY: 10})
    refusing = FleetView(total=10, phases={Phase.HEALTHY: 9, Phase.DRAINING: 1}, refused=1)
    later = T0 + datetime.timedelta(seconds=1)
    writer.submit("fleet", refusing, T0)
    writer.submit("fleet", quiet, later)
    pool.release()
    assert shell.events.reasons("GPUHealthPolicy") == ["CircuitBreakerOpen", "CircuitBreakerClosed"]
    closed = shell.cluster.policy_statuses["fleet"][-1]
    assert closed["cooldownUntil"] == (later + datetime.timedelta(minutes=10)).isoformat()


def draining(count: int, refused: int = 0) -> FleetView:
    phases = {Phase.HEALTHY: 10 - count, Phase.DRAINING: count}
    return FleetView(total=10, phases=phases, refused=refused)


def test_a_policy_is_written_at_most_every_few_seconds_unless_its_breaker_may_turn() -> None:
    shell = writer_shell()
    clock = Clock()
    writer, pool = held_writer(shell, clock)
    writer.submit("fleet", draining(1), T0)
    pool.release()
    clock.seconds += 0.5
    writer.submit("fleet", draining(2), T0)
    pool.release()
    assert clock.waits == [WRITE_EVERY - 0.5]  # not written yet: it waits its turn
    writer.submit("fleet", draining(3), T0)  # and takes the waiting one's place
    clock.seconds += WRITE_EVERY
    clock.run_due()
    pool.release()
    assert [w["unhealthy"] for w in shell.cluster.policy_statuses["fleet"]] == [1, 3]
    clock.seconds += 0.1
    writer.submit("fleet", draining(4, refused=1), T0)  # the breaker opens: at once
    pool.release()
    assert [w["unhealthy"] for w in shell.cluster.policy_statuses["fleet"]] == [1, 3, 4]


def test_a_policy_waiting_its_turn_holds_up_no_other_policy() -> None:
    shell = writer_shell()
    other = policy_object()
    other["metadata"]["name"] = "other"
    shell.store.put("policy", other)
    clock = Clock()
    writer, pool = held_writer(shell, clock)
    writer.submit("fleet", draining(1), T0)
    pool.release()
    writer.submit("fleet", draining(2), T0)
    writer.submit("other", draining(1), T0)
    pool.release()
    assert len(clock.waits) == 1  # "fleet" waits
    assert [w["unhealthy"] for w in shell.cluster.policy_statuses["other"]] == [1]


def test_node_maintenances_that_cannot_be_read_are_said_in_the_policy_status() -> None:
    shell = writer_shell()
    shell.policy_status.write("fleet", FleetView(total=1, phases={Phase.HEALTHY: 1}), T0)
    quiet = shell.cluster.policy_statuses["fleet"][-1]
    assert [c["type"] for c in quiet["conditions"]] == ["Valid"]
    shell.store.maintenance_problem = "the operator may not list NodeMaintenances (403)"
    shell.policy_status.write("fleet", FleetView(total=1, phases={Phase.HEALTHY: 1}), T0)
    conditions = {c["type"]: c for c in shell.cluster.policy_statuses["fleet"][-1]["conditions"]}
    assert conditions["MaintenanceRequests"]["status"] == "False"
    assert "403" in conditions["MaintenanceRequests"]["message"]
    shell.store.maintenance_problem = ""
    shell.policy_status.write("fleet", FleetView(total=1, phases={Phase.HEALTHY: 1}), T0)
    conditions = {c["type"]: c for c in shell.cluster.policy_statuses["fleet"][-1]["conditions"]}
    assert conditions["MaintenanceRequests"]["status"] == "True"


def test_job_sizes_that_cannot_be_read_are_said_in_the_policy_status() -> None:
    shell = writer_shell()
    shell.store.job_size_problem = "jobsets.jobset.x-k8s.io is served as v1, not v1alpha2"
    shell.policy_status.write("fleet", FleetView(total=1, phases={Phase.HEALTHY: 1}), T0)
    conditions = {c["type"]: c for c in shell.cluster.policy_statuses["fleet"][-1]["conditions"]}
    assert (conditions["JobSizes"]["status"], conditions["JobSizes"]["reason"]) == (
        "False",
        "JobSizeUnreadable",
    )
    assert "v1alpha2" in conditions["JobSizes"]["message"]
    assert "MaintenanceRequests" not in conditions

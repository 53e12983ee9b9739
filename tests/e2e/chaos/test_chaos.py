"""Chaos: real faults against the real control plane while nodes fail and recover.

Each scenario disrupts on a timer for ``PITCREW_CHAOS_SECONDS`` while faults land
on a fleet of ``PITCREW_CHAOS_NODES`` (12) half busy with training pods under a
PodDisruptionBudget, then checks the invariants of :mod:`chaos`
(docs/reliability.md): one remediation per fault, the breaker's bound, no budget
exceeded, no lost decision, nothing left cordoned. ``make chaos`` runs them after
the rest of the suite, since they leave the machine loaded for minutes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from pitcrew.dev import devcluster
from pitcrew.dev.stack import SimStack
from support.chaos import NODES, OPERATORS, Chaos, chaos_seconds, holder
from support.fleet import Fleet
from support.toxiproxy import Toxiproxy

SECONDS = chaos_seconds()
pytestmark = pytest.mark.skipif(
    SECONDS is None, reason="chaos runs with PITCREW_CHAOS_SECONDS set (make chaos)"
)
EVERY = 20.0
THROTTLED = {
    # The plain in-flight limits answer 429 at once when full (priority and fairness
    # would queue instead); only system:masters is exempt, so the operator, the
    # agents, kwok, the scheduler and the controller-manager are all throttled.
    "--enable-priority-and-fairness": "false",
    "--max-requests-inflight": "3",
    "--max-mutating-requests-inflight": "2",
}
UNTHROTTLED = {
    "--enable-priority-and-fairness": "true",
    "--max-requests-inflight": "800",
    "--max-mutating-requests-inflight": "400",
}


@pytest.fixture
def cluster_dir(kubeconfig: str) -> Path:
    directory = Path(kubeconfig).parent
    if not (directory / "state.json").is_file():
        pytest.skip("restarts the devcluster's own components")
    return directory


@pytest.fixture
def chaos(
    fleet_factory: type[Fleet],
    pitcrew: SimStack,
    api_client: client.ApiClient,
    workload_namespace: str,
) -> Iterator[Chaos]:
    run = Chaos(fleet_factory(size=NODES), pitcrew, api_client, workload_namespace)
    yield run
    run.finish()


def scenario(chaos: Chaos, disrupt: Callable[[], object], every: float = EVERY) -> None:
    assert SECONDS is not None
    chaos.prepare()
    outcome = chaos.run(seconds=SECONDS, every=every, disrupt=disrupt)
    chaos.check(outcome, seconds=SECONDS, every=every)


def test_the_leader_killed_every_20_s(
    chaos: Chaos, pitcrew: SimStack, api_client: client.ApiClient
) -> None:
    """SIGKILL of the pool's leader mid-work: no goodbye, no Lease release; back as a
    replica that may take a pool again."""

    def kill_the_leader() -> None:
        leader = holder(api_client, chaos.fleet)
        if leader in pitcrew.running:
            pitcrew.kill(leader)

    chaos.operators()
    scenario(chaos, kill_the_leader)


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_the_control_plane_restarted_every_20_s_in_the_middle_of_drains(
    chaos: Chaos, cluster_dir: Path, component: str
) -> None:
    chaos.operators()
    scenario(chaos, lambda: devcluster.restart(directory=cluster_dir, component=component))


def test_a_throttling_apiserver_answering_429_during_a_mass_failure(
    chaos: Chaos, cluster_dir: Path, api_client: client.ApiClient
) -> None:
    """Real 429s from the real apiserver: its in-flight limits cut to a few requests,
    while bursts of faults (the mass failure) land every 20 s."""
    devcluster.restart(directory=cluster_dir, component="kube-apiserver", flags=THROTTLED)
    try:
        chaos.operators()
        scenario(chaos, lambda: chaos.faults(7))
        refused = throttled_requests(api_client)
    finally:
        devcluster.restart(directory=cluster_dir, component="kube-apiserver", flags=UNTHROTTLED)
    print(f"chaos: the apiserver answered 429 to {refused:.0f} requests")
    assert refused > 0


def throttled_requests(api: client.ApiClient) -> float:
    """The apiserver's own count of requests it answered 429 (since it started)."""
    method, url, headers, _, _ = api.param_serialize(
        "GET", "/metrics", header_params={"Accept": "text/plain"}, auth_settings=["BearerToken"]
    )
    answer = api.call_api(method, url, header_params=headers)
    answer.read()
    text = answer.data.decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "apiserver_request"
        for sample in family.samples
        if sample.name == "apiserver_request_total" and sample.labels.get("code") == "429"
    )


def test_the_leader_cut_off_from_the_apiserver(
    chaos: Chaos, api_client: client.ApiClient, pitcrew: SimStack, tmp_path: Path
) -> None:
    """Each operator reaches the apiserver through its own TCP proxy, slowed by
    latency. Every 20 s the leader's proxy is cut for 10 s (a partition: the old
    leader runs on until its renew deadline while the standby waits out the Lease)
    or, every other time, its connections are reset for 5 s."""
    proxy = Toxiproxy(tmp_path)
    try:
        kubeconfigs = {
            name: proxy.kubeconfig(name, pitcrew.operator_kubeconfig, tmp_path / name)
            for name in OPERATORS
        }
        for name in OPERATORS:
            proxy.toxic(name, "latency", "latency", latency=100, jitter=100)
        turns = iter(range(1_000))
        leaders: list[str] = []

        def cut_the_leader() -> None:
            leader = holder(api_client, chaos.fleet)
            leaders.append(leader)
            if leader not in OPERATORS:
                return
            if next(turns) % 2 == 0:
                proxy.enabled(leader, False)
                threading.Timer(10, proxy.enabled, (leader, True)).start()
            else:
                proxy.toxic(leader, "reset", "reset_peer", timeout=0)
                threading.Timer(5, proxy.remove_toxic, (leader, "reset")).start()

        chaos.operators(kubeconfigs)
        scenario(chaos, cut_the_leader)
        # The cut leader lost the Lease and the other took over (both led).
        assert set(leaders) == set(OPERATORS), leaders
    finally:
        chaos.finish()
        proxy.stop()

"""Leader election never dies silently: transport errors are retried, an ended
election ends the process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from pitcrew.controller.leader import EXIT_ELECTION_ENDED, Tenure, TimedCalls, run_until_it_ends
from pitcrew.kube.client import api_client


class LeaseApi:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.kwargs: dict[str, Any] = {}

    def read_namespaced_lease(self, name: str, namespace: str, **kwargs: Any) -> str:
        self.kwargs = kwargs
        if self.error:
            raise self.error
        return f"{namespace}/{name}"


def test_every_lease_call_has_a_timeout() -> None:
    api = LeaseApi()
    assert TimedCalls(api, timeout=2).read_namespaced_lease("l", "ns") == "ns/l"
    assert api.kwargs == {"_request_timeout": 2}


def test_a_connection_error_becomes_an_api_error_the_election_retries() -> None:
    api = LeaseApi(ConnectionRefusedError("apiserver restarting"))
    with pytest.raises(ApiException) as raised:
        TimedCalls(api, timeout=2).read_namespaced_lease("l", "ns")
    assert raised.value.status == 0
    assert "ConnectionRefusedError" in str(raised.value.reason)


def test_api_errors_pass_through_unchanged() -> None:
    api = LeaseApi(ApiException(status=404))
    with pytest.raises(ApiException) as raised:
        TimedCalls(api, timeout=2).read_namespaced_lease("l", "ns")
    assert raised.value.status == 404


@pytest.mark.parametrize("outcome", ["returns", "raises"])
def test_the_process_exits_whenever_the_election_ends(outcome: str) -> None:
    exits: list[int] = []

    def election() -> None:
        if outcome == "raises":
            raise OSError("connection reset")

    run_until_it_ends(election, exit=exits.append)
    assert exits == [EXIT_ELECTION_ENDED]


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


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_tenure_runs_from_when_the_last_good_renewal_was_sent() -> None:
    """A renewal sent at 100 s that answers at 101.5 s buys acting until 102 s (the
    renew deadline after it was sent), never 2 s after the answer: a standby may take
    the Lease 4 s after the renewal landed."""
    clock = Clock()
    tenure = Tenure(2.0, clock=clock)
    assert not tenure.valid()  # no renewal yet
    tenure.renewed(100.0)
    clock.now = 101.5
    assert tenure.valid()
    clock.now = 102.0
    assert not tenure.valid()
    tenure.renewed(99.0)  # an older renewal answering late does not extend it
    assert not tenure.valid()


class RenewingApi(LeaseApi):
    def replace_namespaced_lease(
        self, name: str, namespace: str, body: object, **kwargs: Any
    ) -> str:
        if self.error:
            raise self.error
        return "renewed"


def test_only_a_renewal_that_succeeded_extends_the_tenure() -> None:
    tenure = Tenure(2.0)
    with pytest.raises(ApiException):
        TimedCalls(
            RenewingApi(ConnectionError("refused")), timeout=1, tenure=tenure
        ).replace_namespaced_lease("l", "ns", {})
    assert not tenure.valid()
    TimedCalls(LeaseApi(), timeout=1, tenure=tenure).read_namespaced_lease("l", "ns")
    assert not tenure.valid()  # a read is no renewal
    TimedCalls(RenewingApi(), timeout=1, tenure=tenure).replace_namespaced_lease("l", "ns", {})
    assert tenure.valid()

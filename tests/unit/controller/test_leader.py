"""Leader election never dies silently: transport errors are retried, an ended
election ends the process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from pitcrew.controller.leader import EXIT_ELECTION_ENDED, TimedCalls, run_until_it_ends
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

"""Only transient API errors are retried; a 409 is an answer, handled at once."""

from __future__ import annotations

import pytest
import urllib3
from kubernetes import client

from pitcrew.kube.client import is_transient, retrying


@pytest.mark.parametrize("status", [0, 429, 500, 502, 503, 504])
def test_throttling_server_errors_and_lost_connections_are_transient(status: int) -> None:
    assert is_transient(client.ApiException(status=status))


@pytest.mark.parametrize("status", [400, 403, 404, 409, 410, 422])
def test_answers_are_not_retried(status: int) -> None:
    assert not is_transient(client.ApiException(status=status))


def test_a_connection_error_is_transient() -> None:
    assert is_transient(urllib3.exceptions.ProtocolError("reset"))
    assert is_transient(ConnectionResetError())


def test_an_already_exists_answer_is_raised_on_the_first_call() -> None:
    calls: list[int] = []

    @retrying
    def create() -> None:
        calls.append(1)
        raise client.ApiException(status=409, reason="AlreadyExists")

    with pytest.raises(client.ApiException):
        create()
    assert calls == [1]  # not five calls and five seconds of backoff

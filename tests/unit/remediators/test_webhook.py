"""The webhook rung: only a 2xx is an acceptance, a redirect is never followed, a
receiver that says "not now" (429, 408, 5xx) is asked again, and no message names
more of the URL than its scheme and host (the rest may be a token)."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import ClassVar

import pytest

from pitcrew.api.policy import GPUHealthPolicySpec
from pitcrew.remediators import RemediationError, webhook
from pitcrew.remediators.webhook import Webhook, retry_after, where
from support.remediation_requests import reboot_request

TOKEN = "s3cr3t-t0ken"


class Receiver(http.server.BaseHTTPRequestHandler):
    """Answers each POST with the next of ``answers`` (status, headers)."""

    answers: ClassVar[list[tuple[int, dict[str, str]]]] = []
    seen: ClassVar[list[str]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        Receiver.seen.append(f"{self.command} {self.path} {json.loads(body or b'{}').get('node')}")
        status, headers = Receiver.answers.pop(0) if Receiver.answers else (202, {})
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def log_message(self, *args: object) -> None:
        """Quiet."""


class Elsewhere(Receiver):
    """Where a redirect points: it must see nothing."""

    seen: ClassVar[list[str]] = []

    def _answer(self) -> None:
        Elsewhere.seen.append(f"{self.command} {self.path} {self.headers.get('Idempotency-Key')}")
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


def serve(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setattr(webhook, "_backoff", lambda state: 0.0)
    Receiver.answers, Receiver.seen = [], []
    yield from serve(Receiver)


@pytest.fixture
def elsewhere() -> Iterator[str]:
    Elsewhere.seen = []
    yield from serve(Elsewhere)


def call(url: str) -> str:
    spec = GPUHealthPolicySpec.model_validate(
        {"nodeSelector": {"matchLabels": {"a": "b"}}, "remediation": {"webhook": {"url": url}}}
    )
    request = replace(reboot_request(spec, node="gpu-7"), action="webhook", key="pitcrew-k1")
    return Webhook().start(request)


def test_an_accepted_request_names_the_receiver_without_its_token(receiver: str) -> None:
    said = call(f"{receiver}/hooks/{TOKEN}?token={TOKEN}")
    assert said == f"webhook at {receiver} accepted webhook (HTTP 202)"
    assert Receiver.seen == [f"POST /hooks/{TOKEN}?token={TOKEN} gpu-7"]


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_neither_followed_nor_accepted(
    receiver: str, elsewhere: str, status: int
) -> None:
    Receiver.answers = [(status, {"Location": f"{elsewhere}/landing?token={TOKEN}"})]
    with pytest.raises(RemediationError, match=f"HTTP {status} \\(a redirect to") as refused:
        call(f"{receiver}/rma?token={TOKEN}")
    assert TOKEN not in str(refused.value)
    assert Elsewhere.seen == []
    assert len(Receiver.seen) == 1  # a final answer: not asked again


@pytest.mark.parametrize("status", [429, 408, 503])
def test_a_receiver_that_says_not_now_is_asked_again(receiver: str, status: int) -> None:
    Receiver.answers = [(status, {"Retry-After": "0"}), (status, {})]
    assert "accepted" in call(f"{receiver}/rma")
    assert len(Receiver.seen) == 3


def test_a_refusal_names_the_receiver_without_its_token(receiver: str) -> None:
    Receiver.answers = [(403, {})]
    with pytest.raises(RemediationError, match="refused: HTTP 403") as refused:
        call(f"{receiver}/hooks/{TOKEN}")
    assert TOKEN not in str(refused.value)


def test_an_unreachable_receiver_is_named_without_its_token(receiver: str) -> None:
    Receiver.answers = [(503, {})] * webhook.ATTEMPTS
    with pytest.raises(RemediationError, match="unreachable after 5 attempts") as refused:
        call(f"{receiver}/hooks/{TOKEN}")
    assert TOKEN not in str(refused.value)


def test_a_url_with_user_info_is_refused_without_quoting_it(receiver: str) -> None:
    with pytest.raises(RemediationError, match="cannot be requested") as refused:
        call(f"https://ops:{TOKEN}@rma.example.com/hook")
    assert TOKEN not in str(refused.value)


def test_where_keeps_scheme_host_and_port_only() -> None:
    assert where(f"https://ops:{TOKEN}@rma.example.com:8443/x/{TOKEN}?t=1") == (
        "https://rma.example.com:8443"
    )
    assert where("http://[fd00::1]/hook") == "http://[fd00::1]"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("5", 5.0),
        ("3600", webhook.RETRY_AFTER_MAX),
        ("Thu, 01 Jan 1970 00:00:10 GMT", 10.0),
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0),
        ("soon", None),
        (None, None),
    ],
)
def test_retry_after_is_read_and_capped(value: str | None, seconds: float | None) -> None:
    assert retry_after(value, now=0.0) == seconds

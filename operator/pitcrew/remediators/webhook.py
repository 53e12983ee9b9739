"""webhook (and reimage): POST a remediation request to an external system.

For RMA, ticketing or provisioning systems (reimage through MaaS, Metal3 or
a bespoke tool). The request carries an ``Idempotency-Key`` header (the
decision's key), so a retry after a timeout or a new leader repeating the
call never opens a second ticket at a receiver that honours it.

What an answer means:

- **2xx** is the receiver's acceptance, the only one;
- **3xx** is refused, never followed: urllib would follow a 301/302/303 as a
  bodiless GET and report the page it lands on as accepted, and would carry the
  ``Idempotency-Key`` to whatever host ``Location`` names. The policy's URL must
  be the receiver's;
- **408, 429 and 5xx** (and a connection that fails or times out) are retried
  with backoff, a ``Retry-After`` honoured up to :data:`RETRY_AFTER_MAX`: a
  receiver that is busy or rate-limits is not a receiver that said no;
- any other **4xx** is the receiver's final answer and fails the rung.

The URL may carry a token (in its path, query or user info), and what a
remediator says lands in Events and in ``status.remediation``, which more people
read than the policy: every message names the receiver by scheme and host only
(:func:`where`).
"""

from __future__ import annotations

import email.utils
import http.client
import json
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from tenacity import RetryCallState, retry, retry_if_exception, stop_after_attempt
from tenacity.wait import wait_exponential_jitter

from pitcrew.api.vocabulary import OPERATOR_COMPONENT
from pitcrew.remediators.base import RemediationError, RemediationRequest

ATTEMPTS = 5
RETRY_AFTER_MAX = 30.0
"""Longest wait a receiver's ``Retry-After`` gets, in seconds: the call holds a thread
of the remediation pool meanwhile."""
RETRIED_STATUS = frozenset({408, 429})
"""4xx answers that mean "not now", retried like a 5xx."""


def where(url: str) -> str:
    """The receiver as messages name it: ``scheme://host[:port]``, never the path, query
    or user info, where a token may be."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{parts.scheme or '?'}://{host}{f':{port}' if port else ''}"


class _RetryableError(Exception):
    def __init__(self, message: str, *, after: float | None = None) -> None:
        super().__init__(message)
        self.after = after
        """Seconds the receiver asked to wait (``Retry-After``), if it did."""


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx is an answer, not a place to go: urllib raises it as an ``HTTPError``."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_RefuseRedirects)


def _retryable(error: BaseException) -> bool:
    return isinstance(error, _RetryableError)


def retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """``Retry-After`` in seconds (delta-seconds or an HTTP date), capped at
    :data:`RETRY_AFTER_MAX`; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), RETRY_AFTER_MAX)
    try:
        at = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    seconds = at.timestamp() - (time.time() if now is None else now)
    return min(max(seconds, 0.0), RETRY_AFTER_MAX)


_backoff = wait_exponential_jitter(multiplier=0.2, max=5)


def _wait(state: RetryCallState) -> float:
    """The backoff, or longer where the receiver asked for it."""
    backoff = _backoff(state)
    error = state.outcome.exception() if state.outcome else None
    after = error.after if isinstance(error, _RetryableError) else None
    return max(backoff, after or 0.0)


class Webhook:
    def start(self, request: RemediationRequest) -> str:
        spec = request.policy.remediation.webhook
        if spec is None:
            raise RemediationError(f"{request.action} needs spec.remediation.webhook.url")
        receiver = where(spec.url)
        payload = json.dumps(
            {
                "node": request.node,
                "action": request.action,
                "faultClass": request.fault_class,
                "reason": request.reason,
                "message": request.message,
                "gpus": list(request.gpus),
                "attempt": request.attempt,
                "idempotencyKey": request.key,
            }
        ).encode()
        timeout = spec.timeout.total_seconds()

        @retry(
            retry=retry_if_exception(_retryable),
            wait=_wait,
            stop=stop_after_attempt(ATTEMPTS),
            reraise=True,
        )
        def post() -> int:
            try:
                call = urllib.request.Request(  # noqa: S310 - the policy's URL, http(s) by CEL
                    spec.url,
                    data=payload,
                    method="POST",
                    headers={
                        "Content-Type": "application/json",
                        "Idempotency-Key": request.key,
                        "User-Agent": OPERATOR_COMPONENT,
                    },
                )
                with _OPENER.open(call, timeout=timeout) as response:
                    return int(response.status)
            except urllib.error.HTTPError as error:
                code = error.code
                if 300 <= code < 400:
                    target = error.headers.get("Location") if error.headers else None
                    to = f" to {where(target)}" if target else ""
                    raise RemediationError(
                        f"webhook at {receiver} answered HTTP {code} (a redirect{to}): not "
                        "followed, and not an acceptance; set spec.remediation.webhook.url "
                        "to the receiver itself"
                    ) from None
                if code >= 500 or code in RETRIED_STATUS:
                    after = retry_after(error.headers.get("Retry-After") if error.headers else None)
                    raise _RetryableError(f"HTTP {code}", after=after) from None
                raise RemediationError(f"webhook at {receiver} refused: HTTP {code}") from None
            except (http.client.InvalidURL, ValueError):
                # These quote the URL: not repeated here.
                raise RemediationError(
                    f"webhook at {receiver}: spec.remediation.webhook.url cannot be requested "
                    "(user info, a port that is not a number?)"
                ) from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
                raise _RetryableError(str(error)) from None
            except http.client.HTTPException as error:
                raise _RetryableError(f"unreadable answer ({type(error).__name__})") from None

        try:
            status = post()
        except _RetryableError as error:
            raise RemediationError(
                f"webhook at {receiver} unreachable after {ATTEMPTS} attempts: {error}"
            ) from None
        return f"webhook at {receiver} accepted {request.action} (HTTP {status})"

"""webhook (and reimage): POST a remediation request to an external system.

For RMA, ticketing or provisioning systems (reimage through MaaS, Metal3 or
a bespoke tool). The request carries an ``Idempotency-Key`` header (the
decision's key), so a retry after a timeout or a new leader repeating the
call never opens a second ticket at a receiver that honours it. 5xx and
connection errors are retried with backoff; a 4xx is the receiver's final
answer and fails the rung.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from pitcrew.api.vocabulary import OPERATOR_COMPONENT
from pitcrew.remediators.base import RemediationError, RemediationRequest

ATTEMPTS = 5


class _RetryableError(Exception):
    pass


def _retryable(error: BaseException) -> bool:
    return isinstance(error, _RetryableError)


class Webhook:
    def start(self, request: RemediationRequest) -> str:
        spec = request.policy.remediation.webhook
        if spec is None:
            raise RemediationError(f"{request.action} needs spec.remediation.webhook.url")
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
            wait=wait_exponential_jitter(multiplier=0.2, max=5),
            stop=stop_after_attempt(ATTEMPTS),
            reraise=True,
        )
        def post() -> int:
            http = urllib.request.Request(  # noqa: S310 - the policy's URL, http(s) by CEL
                spec.url,
                data=payload,
                method="POST",
                headers={
                    "Content-Type": "application/json",
                    "Idempotency-Key": request.key,
                    "User-Agent": OPERATOR_COMPONENT,
                },
            )
            try:
                with urllib.request.urlopen(http, timeout=timeout) as response:  # noqa: S310
                    return int(response.status)
            except urllib.error.HTTPError as error:
                if error.code >= 500:
                    raise _RetryableError(f"HTTP {error.code}") from None
                raise RemediationError(f"webhook {spec.url} refused: HTTP {error.code}") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
                raise _RetryableError(str(error)) from None

        try:
            status = post()
        except _RetryableError as error:
            raise RemediationError(
                f"webhook {spec.url} unreachable after {ATTEMPTS} attempts: {error}"
            ) from None
        return f"webhook {spec.url} accepted {request.action} (HTTP {status})"

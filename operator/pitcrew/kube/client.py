"""API clients and the retry policy for transient API errors.

A 429 (throttled), a 5xx or a connection error is retried with exponential
backoff and jitter; any other error is a real answer and is raised at once. A
409 in particular is an answer: on a create it means "exists", which every
create here handles at once (a GPUNode, a Job, a CRD), and a conflicting
update is recomputed from a fresh read by its caller (node edits), never
replayed as it was. The bound is small (a few
seconds) because the round loop retries the whole decision later anyway:
level-triggered code does not need heroic retries, only no crash loops.

The exception is a write that nothing will redo: a probe pod's report is minutes
of burn-in that no round recomputes, so it is retried (``patient``) for as long
as its Job may run, not for a few seconds.
"""

from __future__ import annotations

import json
import os
from typing import Any

import urllib3
from kubernetes import client, config
from tenacity import (
    retry,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)

TRANSIENT_STATUS = {429, 500, 502, 503, 504}
REQUEST_TIMEOUT = urllib3.Timeout(connect=10.0, read=60.0)


def is_transient(error: BaseException) -> bool:
    if isinstance(error, client.ApiException):
        return error.status in TRANSIENT_STATUS or error.status == 0
    return isinstance(error, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)


retrying = retry(
    retry=retry_if_exception(is_transient),
    wait=wait_exponential_jitter(multiplier=0.2, max=5.0),
    stop=stop_after_attempt(5),
    reraise=True,
)


def patient(seconds: float) -> Any:
    """The transient-error retry for a write nothing will redo: backoff up to 10 s
    between tries, for ``seconds`` in all."""
    return retry(
        retry=retry_if_exception(is_transient),
        wait=wait_exponential_jitter(multiplier=0.5, max=10.0),
        stop=stop_after_delay(seconds),
        reraise=True,
    )


def api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """A client from ``kubeconfig``, ``$KUBECONFIG``, the pod's service account when
    running in a pod, else ``~/.kube/config``."""
    configuration = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_kube_config(config_file=path, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = 64
    api = client.ApiClient(configuration)
    # No call may hang for ever on an apiserver that went away mid-request (a
    # restart, a partition): every request of this client has a deadline.
    api.rest_client.pool_manager.connection_pool_kw["timeout"] = REQUEST_TIMEOUT
    return api


def use_as_default(api: client.ApiClient) -> None:
    """Make ``api``'s configuration the process default (the leader-election lock
    creates its own client from the default)."""
    client.Configuration.set_default(api.configuration)


def to_dict(api: client.ApiClient, obj: Any) -> dict[str, Any]:
    """A client model object as the JSON dict the apiserver sent."""
    result: dict[str, Any] = api.sanitize_for_serialization(obj)
    return result


def request(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    body: Any = None,
    content_type: str = "application/json",
    query: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A raw JSON request on the hot paths (status applies, Events).

    The generated client validates every body and builds models for every
    answer; for the agents' and operator's frequent writes that costs more CPU
    than the request itself. Errors are raised as ``ApiException`` like the
    generated methods do, so callers and the retry policy treat them alike."""
    method_, url, headers, serialized, _ = api.param_serialize(
        method,
        path,
        query_params=list((query or {}).items()),
        header_params={"Content-Type": content_type, "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method_, url, header_params=headers, body=serialized)
    response.read()
    data = response.data or b"{}"
    if not 200 <= response.status < 300:
        raise client.ApiException(
            status=response.status, reason=response.reason, body=data.decode(errors="replace")
        )
    decoded: dict[str, Any] = json.loads(data)
    return decoded


def list_all(
    api: client.ApiClient, path: str, *, query: dict[str, str] | None = None, page: int = 500
) -> list[dict[str, Any]]:
    """Every object at collection ``path``, ``page`` at a time, each page retried on
    transient errors: one LIST of 10,000 Nodes holds the apiserver's memory for the
    whole answer while it is sent; a page at a time does not."""
    items: list[dict[str, Any]] = []
    token = ""
    while True:
        params = {**(query or {}), "limit": str(page), **({"continue": token} if token else {})}
        answer = retrying(request)(api, "GET", path, query=params)
        items.extend(answer.get("items") or [])
        token = (answer.get("metadata") or {}).get("continue") or ""
        if not token:
            return items

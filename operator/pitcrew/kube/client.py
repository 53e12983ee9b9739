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

A command that starts against a cluster checks it first (:func:`reach`): a
kubeconfig that cannot be read (:class:`ClusterConfigError`) or a server that does
not answer (:class:`ClusterUnreachableError`) is one line naming the file or the
server and the reason, not a traceback from deep in the first call.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client, config
from tenacity import (
    retry,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)

from pitcrew.api.errors import PitcrewError

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


class ClusterConfigError(PitcrewError):
    """No usable kubeconfig: the file is missing, is not YAML, or is not a kubeconfig
    (or, in a pod, its service account is not mounted). The command was pointed at
    the wrong file: pass ``--kubeconfig`` or set ``$KUBECONFIG``."""


class ClusterUnreachableError(PitcrewError):
    """No apiserver answered at the kubeconfig's server: refused, timed out, a name
    that does not resolve, a TLS handshake that failed."""


DEFAULT_KUBECONFIG = "~/.kube/config"


def api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """A client of the cluster :func:`load_configuration` finds."""
    configuration = load_configuration(kubeconfig)
    configuration.connection_pool_maxsize = 64
    api = client.ApiClient(configuration)
    # No call may hang for ever on an apiserver that went away mid-request (a
    # restart, a partition): every request of this client has a deadline.
    api.rest_client.pool_manager.connection_pool_kw["timeout"] = REQUEST_TIMEOUT
    return api


def load_configuration(kubeconfig: str | None = None) -> client.Configuration:
    """The cluster and credentials of ``kubeconfig``, ``$KUBECONFIG``, the pod's
    service account when running in a pod, else ``~/.kube/config``;
    :class:`ClusterConfigError` when that cannot be read.

    In a pod, the apiserver's address is ``$KUBERNETES_SERVICE_HOST`` and ``_PORT``,
    which the kubelet sets in every pod, as client-go's in-cluster configuration takes
    it: no cluster DNS is needed to reach the apiserver."""
    configuration = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if not path and os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException as error:
            raise ClusterConfigError(f"cannot use the pod's service account: {error}") from None
    else:
        _load_kubeconfig(path or DEFAULT_KUBECONFIG, configuration)
    return configuration


def _load_kubeconfig(paths: str, configuration: client.Configuration) -> None:
    """Load a kubeconfig (or a ``$KUBECONFIG`` list of them) into ``configuration``,
    each way it can fail a :class:`ClusterConfigError` that names the file."""
    names = [name for name in paths.split(os.pathsep) if name]
    # The client skips missing files of a list, then says only "No configuration found".
    if not any(Path(name).expanduser().is_file() for name in names):
        raise ClusterConfigError(
            f"no kubeconfig at {', '.join(names)}: pass --kubeconfig FILE or set $KUBECONFIG"
        )
    try:
        config.load_kube_config(config_file=paths, client_configuration=configuration)
    except config.ConfigException as error:
        raise ClusterConfigError(f"cannot use the kubeconfig {paths}: {error}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        raise ClusterConfigError(f"cannot read the kubeconfig {paths}: not YAML{line}") from None
    except OSError as error:
        reason = error.strerror or str(error)
        raise ClusterConfigError(f"cannot read the kubeconfig {paths}: {reason}") from None


def reach(api: client.ApiClient) -> None:
    """Ask the apiserver its version, once: :class:`ClusterUnreachableError`, naming
    the server and why, when nothing answers. An answer that is an error (401 for
    credentials it refuses) is raised as the ``ApiException`` it is.

    One try, through the client's own pool (its TLS and credentials) but without
    urllib3's retries, which would log a warning for each before the one line."""
    method, url, headers, _, _ = api.param_serialize(
        "GET",
        "/version",
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    try:
        response = api.rest_client.pool_manager.request(
            method, url, headers=headers, retries=False, timeout=REQUEST_TIMEOUT
        )
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise ClusterUnreachableError(
            f"cannot reach the cluster at {api.configuration.host}: {connection_failure(error)}"
        ) from None
    if not 200 <= response.status < 300:
        raise client.ApiException(
            status=response.status,
            reason=response.reason,
            body=response.data.decode(errors="replace"),
        )


def connection_failure(error: BaseException) -> str:
    """Why a connection failed, in the words of its innermost cause: "Connection
    refused", "timed out", "Name or service not known"; urllib3's wrappers repeat the
    host and the retry count around it."""
    cause: BaseException | None = error
    innermost = error
    seen: set[int] = set()
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        innermost = cause
        wrapped = getattr(cause, "reason", None)  # MaxRetryError keeps its cause there
        cause = wrapped if isinstance(wrapped, BaseException) else cause.__cause__
    if isinstance(innermost, OSError) and innermost.strerror:
        return innermost.strerror
    return str(innermost) or type(innermost).__name__


def answer_text(error: client.ApiException) -> str:
    """An apiserver's error answer in one line: its status, reason and the message of
    the Status object it sent (``403 Forbidden: gpunodes.pitcrew.dev is forbidden:
    ...``)."""
    text = f"{error.status} {error.reason}"
    try:
        message = json.loads(error.body or "{}").get("message")
    except (ValueError, AttributeError):
        message = None
    return f"{text}: {message}" if message else text


def use_as_default(api: client.ApiClient) -> None:
    """Make ``api``'s configuration the process default (kopf's login and any
    generated client made without one use it)."""
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
    timeout: float | None = None,
) -> dict[str, Any]:
    """A raw JSON request on the hot paths (status applies, Events, the Leases);
    ``timeout``, in seconds, instead of the client's :data:`REQUEST_TIMEOUT`.

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
    response = api.call_api(
        method_, url, header_params=headers, body=serialized, _request_timeout=timeout
    )
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
    return list_versioned(api, path, query=query, page=page)[0]


def list_versioned(
    api: client.ApiClient, path: str, *, query: dict[str, str] | None = None, page: int = 500
) -> tuple[list[dict[str, Any]], str]:
    """:func:`list_all`, and the resourceVersion of the listing (the same for all its
    pages: a watch from it misses nothing the listing did not show)."""
    items: list[dict[str, Any]] = []
    token = ""
    while True:
        params = {**(query or {}), "limit": str(page), **({"continue": token} if token else {})}
        answer = retrying(request)(api, "GET", path, query=params)
        items.extend(answer.get("items") or [])
        meta = answer.get("metadata") or {}
        token = meta.get("continue") or ""
        if not token:
            return items, str(meta.get("resourceVersion") or "")

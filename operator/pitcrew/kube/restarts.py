"""Ask pods to restart in place: the ``pitcrew.dev/restart-requested`` annotation.

One merge patch per pod, bound to the pod's UID (the patch carries it, and the
apiserver refuses a patch that would change an object's UID): a pod its launcher
recreated under the same name since the request was decided is another pod, started
after the fault, and is left alone. The patches of a large job go out a few at a
time in parallel; one that fails for any other reason fails the request, which the
next decision makes again (the value is the same, so a pod asked already is skipped
by :func:`pitcrew.core.in_place.survivors`).
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client

from pitcrew.api.vocabulary import OPERATOR_MANAGER, RESTART_REQUESTED_ANNOTATION
from pitcrew.kube.client import retrying

PARALLEL = 8
"""Patches in flight at once for one request."""


def request_restart(
    api: client.ApiClient, pods: Iterable[tuple[str, str, str]], *, value: str
) -> list[str]:
    """Annotate each pod given as (namespace, name, UID) with the request ``value``; the
    pods annotated, as ``namespace/name`` (not those gone or replaced meanwhile)."""
    core = client.CoreV1Api(api)

    def one(pod: tuple[str, str, str]) -> str:
        namespace, name, uid = pod
        body = {"metadata": {"uid": uid, "annotations": {RESTART_REQUESTED_ANNOTATION: value}}}
        try:
            retrying(core.patch_namespaced_pod)(
                name, namespace, body, field_manager=OPERATOR_MANAGER, _preload_content=False
            )
        except client.ApiException as error:
            if error.status in (404, 409, 422):  # gone, or another pod of that name by now
                return ""
            raise
        return f"{namespace}/{name}"

    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        return [key for key in pool.map(one, pods) if key]

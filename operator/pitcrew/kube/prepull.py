"""Pre-pull pods: a spare pulls a training job's images before the job needs it.

The pod (:func:`pod`) lists each image as a container whose command is ``true``:
the kubelet pulls every container's image before it starts it, and the command
only has to end. Containers, not init containers: an init container that fails
(an image without ``true``) stops the ones after it before their images are
pulled, while containers start independently and each pulls its own. A container
that cannot start has pulled its image all the same, so the pod's end, Succeeded or
Failed, says nothing; what the node holds is read from ``Node.status.images``.

The pod runs in the job's namespace, under the job's ServiceAccount (whose
``imagePullSecrets`` admission adds) and with the job's own ``imagePullSecrets``,
so it can pull exactly what the job can and nothing more, and no tenant's secret
is copied anywhere; its token is not mounted, and it requests a sliver of CPU and
memory and no GPU, so it never keeps the job's replacement off the spare. It is
pinned to the spare by a required node affinity on ``metadata.name`` (as
:func:`pitcrew.kube.jobs.pinned_to` pins probe Jobs), tolerates the spare's taint,
and runs at the policy's probe PriorityClass when it names one. A pull that never
ends (a registry that refuses it) ends at :data:`DEADLINE_SECONDS`.
"""

from __future__ import annotations

import re
from typing import Any

from kubernetes import client

from pitcrew.api.vocabulary import OPERATOR_MANAGER, PRE_PULL_LABEL, SPARE_TAINT
from pitcrew.core.prepull import PrePull
from pitcrew.kube.client import retrying
from pitcrew.kube.jobs import pinned_to

DEADLINE_SECONDS = 3600
"""How long a pre-pull pod may run: an hour pulls tens of GB on a slow link."""
RESOURCES = {"cpu": "10m", "memory": "32Mi"}
"""Requests and limits of each container: ``true`` needs next to nothing."""
_NAME = re.compile(r"[^a-z0-9-]+")


def name(pre_pull: PrePull) -> str:
    """``pitcrew-pre-pull-<node>-<key>``, the node cut to fit a pod's 63-character
    hostname, so two spares' pods never share a name."""
    node = _NAME.sub("-", pre_pull.node.lower()).strip("-")[:34].rstrip("-")
    return f"pitcrew-pre-pull-{node}-{pre_pull.key}"


def pod(pre_pull: PrePull, *, priority_class: str = "") -> dict[str, Any]:
    """The pre-pull pod's manifest."""
    containers = [
        {
            "name": f"pull-{index}",
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["true"],
            "resources": {"requests": RESOURCES, "limits": RESOURCES},
        }
        for index, image in enumerate(pre_pull.images)
    ]
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": DEADLINE_SECONDS,
        "affinity": pinned_to(pre_pull.node),
        "tolerations": [{"key": SPARE_TAINT, "operator": "Exists"}],
        "serviceAccountName": pre_pull.service_account,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 0,
        "containers": containers,
    }
    if pre_pull.pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in pre_pull.pull_secrets]
    if priority_class:
        spec["priorityClassName"] = priority_class
    labels = {PRE_PULL_LABEL: pre_pull.key, "app.kubernetes.io/managed-by": "pitcrew"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name(pre_pull), "namespace": pre_pull.namespace, "labels": labels},
        "spec": spec,
    }


def create(api: client.ApiClient, manifest: dict[str, Any]) -> bool:
    """Create the pre-pull pod; False when it exists already."""
    try:
        retrying(client.CoreV1Api(api).create_namespaced_pod)(
            manifest["metadata"]["namespace"],
            client.V1Pod.model_validate(manifest),
            field_manager=OPERATOR_MANAGER,
        )
    except client.ApiException as error:
        if error.status == 409:
            return False
        raise
    return True


def delete(api: client.ApiClient, *, namespace: str, name: str) -> bool:
    """Delete a pre-pull pod; False when it is gone already."""
    try:
        retrying(client.CoreV1Api(api).delete_namespaced_pod)(name, namespace)
    except client.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True

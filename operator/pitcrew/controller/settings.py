"""The operator's settings as the controller uses them.

The model itself, :class:`~pitcrew.api.settings.OperatorSettings`, lives in the API
layer, where the chart and docs generators read it too; the controller imports it
from here, with what it implies for the pods of the Jobs it creates.
"""

from __future__ import annotations

import socket

from pitcrew.api.settings import JobSettings, OperatorSettings
from pitcrew.kube.jobs import JobPods

__all__ = ["OperatorSettings", "identity", "job_pods", "operator_pod"]


def job_pods(jobs: JobSettings) -> JobPods:
    """Pull secrets and runtime class of the probe, pair and reset Jobs' pods."""
    return JobPods(image_pull_secrets=jobs.image_pull_secrets, runtime_class=jobs.runtime_class)


def identity(settings: OperatorSettings) -> str:
    """This process's name as the Lease's holder: ``--identity``, else the host name.
    In a pod it is the pod's name: the chart passes ``$(POD_NAME)``, and a pod's host
    name is its name too."""
    return settings.leader.identity or socket.gethostname()


def operator_pod(settings: OperatorSettings) -> str:
    """``namespace/name`` of the pod this process runs in, when it runs in one: the pod
    of its identity in its namespace. Outside a pod no pod has that key."""
    return f"{settings.namespace}/{identity(settings)}"

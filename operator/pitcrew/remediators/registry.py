"""Which remediator carries out which ladder action.

One table, built once by the operator and injected into the executor, so the
executor never names a remediator and the unit tests hand it fakes. ``reimage``
is a webhook by design: reimaging is the provisioning system's job (MAAS,
Ironic, a vendor portal), and the webhook is how Pitcrew asks it.
"""

from __future__ import annotations

from kubernetes import client

from pitcrew.api.policy import RemediationAction
from pitcrew.kube.jobs import JobPods
from pitcrew.remediators.base import Remediator
from pitcrew.remediators.clusterapi import ClusterApi
from pitcrew.remediators.redfish import RedfishReboot
from pitcrew.remediators.reset_gpu import ResetGpu
from pitcrew.remediators.webhook import Webhook


def remediators(
    api: client.ApiClient,
    *,
    namespace: str,
    reset_image: str,
    reset_account: str,
    pods: JobPods,
) -> dict[RemediationAction, Remediator]:
    return {
        RemediationAction.RESET_GPU: ResetGpu(
            api, namespace=namespace, image=reset_image, service_account=reset_account, pods=pods
        ),
        RemediationAction.REBOOT: RedfishReboot(api, namespace=namespace),
        RemediationAction.REIMAGE: Webhook(),
        RemediationAction.WEBHOOK: Webhook(),
        RemediationAction.CLUSTER_API: ClusterApi(api),
    }

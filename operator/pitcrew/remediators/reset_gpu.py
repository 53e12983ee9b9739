"""reset-gpu: a privileged Job on the node runs ``nvidia-smi -r`` on the faulty GPUs.

A reset only works on GPUs no process holds, which is why it runs after the
drain; it clears a pending row remap, a stuck NVLink and most Xid 48/94/95
states without the minutes a reboot costs.
"""

from __future__ import annotations

from kubernetes import client

from pitcrew.kube import jobs
from pitcrew.remediators.base import RemediationRequest


class ResetGpu:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        namespace: str,
        image: str,
        service_account: str,
        pods: jobs.JobPods,
    ) -> None:
        self.api, self.namespace, self.image = api, namespace, image
        self.service_account = service_account
        self.pods = pods

    def start(self, request: RemediationRequest) -> str:
        job = jobs.reset_job(
            name=request.key,
            namespace=self.namespace,
            node=request.node,
            gpus=request.gpus,
            image=self.image,
            deadline_seconds=request.timeout_seconds,
            service_account=self.service_account,
            pods=self.pods,
        )
        created = jobs.create(self.api, job)
        target = ",".join(map(str, request.gpus)) or "all GPUs"
        return (
            f"{'created' if created else 'found'} Job {self.namespace}/{request.key} "
            f"resetting {target}"
        )

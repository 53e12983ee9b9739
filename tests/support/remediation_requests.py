"""A reboot request as the executor builds it, for the remediator unit tests."""

from __future__ import annotations

from pitcrew.api.policy import GPUHealthPolicySpec
from pitcrew.remediators import RemediationRequest


def reboot_request(
    spec: GPUHealthPolicySpec, *, node: str = "n0", annotations: dict[str, str] | None = None
) -> RemediationRequest:
    return RemediationRequest(
        node=node,
        node_object={"metadata": {"annotations": annotations or {}}},
        action="reboot",
        key="k",
        attempt=1,
        fault_class="fatal",
        reason="Xid",
        message="",
        gpus=(),
        timeout_seconds=600,
        policy=spec,
    )

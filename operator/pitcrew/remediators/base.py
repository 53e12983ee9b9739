"""The remediator interface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from pitcrew.api.errors import PitcrewError
from pitcrew.api.policy import GPUHealthPolicySpec


class RemediationError(PitcrewError, RuntimeError):
    """The repair could not be started; the message says why and what to fix."""


@dataclass(frozen=True)
class RemediationRequest:
    node: str
    node_object: dict[str, Any]
    """The Node as the apiserver returned it (annotations name the BMC or Machine)."""
    action: str
    key: str
    attempt: int
    fault_class: str
    reason: str
    message: str
    gpus: tuple[int, ...]
    timeout_seconds: int
    policy: GPUHealthPolicySpec


class Remediator(Protocol):
    def start(self, request: RemediationRequest) -> str:
        """Start the repair; return a short description for the Event."""
        ...

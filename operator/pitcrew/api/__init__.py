"""Pitcrew's API (group ``pitcrew.dev``, version ``v1alpha1``) as pydantic models."""

from pitcrew.api.gpunode import GPUNode, GPUNodeStatus, Phase
from pitcrew.api.meta import API_VERSION, GROUP, VERSION
from pitcrew.api.policy import GPUHealthPolicy, GPUHealthPolicySpec
from pitcrew.api.validationrun import ValidationRun

__all__ = [
    "API_VERSION",
    "GROUP",
    "VERSION",
    "GPUHealthPolicy",
    "GPUHealthPolicySpec",
    "GPUNode",
    "GPUNodeStatus",
    "Phase",
    "ValidationRun",
]

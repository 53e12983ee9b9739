"""The check configuration a node's agent must run, resolved from its policy.

The agent has no flags for checks and no access to policies: the operator
writes this into the node's ``GPUNode.spec.checks``, which the agent watches.
So ``spec.checks`` of a GPUHealthPolicy (interval, heartbeat, thresholds,
disabled checks, expected GPUs) reaches every agent of the policy within a
round of the operator and one sweep of the agent, and a node moving to
another policy gets that policy's checks.
"""

from __future__ import annotations

from pitcrew.api.gpunode import AgentChecks
from pitcrew.core.views import NodeView, PolicyView


def agent_checks(policy: PolicyView, node: NodeView) -> AgentChecks:
    """``expectedGpus`` defaults to the node's ``nvidia.com/gpu`` capacity: a node
    that loses a GPU then fails ``gpu-count`` instead of passing with seven."""
    checks = policy.spec.checks
    return AgentChecks(
        policy=policy.name,
        interval=checks.interval,
        heartbeat=checks.heartbeat,
        expected_gpus=checks.expected_gpus or node.gpus or None,
        disabled=sorted(set(checks.disabled)),
        thresholds=dict(sorted(checks.thresholds.items())),
    )

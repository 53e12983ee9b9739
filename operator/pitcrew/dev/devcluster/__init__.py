"""A real local Kubernetes control plane with simulated GPU nodes, for tests and the demo.

Public surface: :func:`up`, :func:`down`, :func:`status`, :func:`restart`,
:func:`node_kubeconfig`, :func:`heartbeats`, :class:`Heartbeats`, :class:`ClusterState`
and :class:`DevclusterError`.
"""

from pitcrew.dev.devcluster.cluster import (
    ClusterState,
    Heartbeats,
    down,
    heartbeats,
    node_kubeconfig,
    restart,
    status,
    up,
)
from pitcrew.dev.devcluster.errors import DevclusterError

__all__ = [
    "ClusterState",
    "DevclusterError",
    "Heartbeats",
    "down",
    "heartbeats",
    "node_kubeconfig",
    "restart",
    "status",
    "up",
]

"""A real local Kubernetes control plane with simulated GPU nodes, for tests and the demo.

Public surface: :func:`up`, :func:`down`, :func:`status`, :func:`restart`,
:func:`node_kubeconfig`, :class:`ClusterState` and :class:`DevclusterError`.
"""

from pitcrew.sim.devcluster.cluster import (
    ClusterState,
    down,
    node_kubeconfig,
    restart,
    status,
    up,
)
from pitcrew.sim.devcluster.errors import DevclusterError

__all__ = [
    "ClusterState",
    "DevclusterError",
    "down",
    "node_kubeconfig",
    "restart",
    "status",
    "up",
]

"""A real local Kubernetes control plane with simulated GPU nodes, for tests and the demo.

Public surface: :func:`up`, :func:`down`, :func:`status`, :func:`restart`,
:class:`ClusterState` and :class:`DevclusterError`.
"""

from pitcrew.sim.devcluster.cluster import ClusterState, down, restart, status, up
from pitcrew.sim.devcluster.errors import DevclusterError

__all__ = ["ClusterState", "DevclusterError", "down", "restart", "status", "up"]

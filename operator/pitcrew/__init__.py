"""Pitcrew: a Kubernetes operator that keeps GPU training fleets healthy.

The package is in layers, one folder each (``docs/architecture.md``):
``cli`` > ``sim`` > ``controller`` | ``node`` | ``deploy`` > ``remediators`` |
``client`` > ``kube`` > ``core`` > ``api``. Importing ``pitcrew`` loads the API
models (for the error root), nothing of the operator's shell or the simulation.
"""

from importlib.metadata import PackageNotFoundError, version

from pitcrew.api.errors import PitcrewError

try:
    __version__ = version("pitcrew")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["PitcrewError", "__version__"]

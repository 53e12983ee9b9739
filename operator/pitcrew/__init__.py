"""Pitcrew: a Kubernetes operator that keeps GPU training fleets healthy.

The package is in layers, one folder each (``docs/architecture.md``):
``cli`` > ``sim`` > ``controller`` | ``node`` | ``deploy`` > ``remediators`` |
``client`` > ``kube`` > ``core`` > ``api``. Importing ``pitcrew`` loads the API
models (for the error root), nothing of the operator's shell or the simulation.
"""

from gpuhealth import distribution
from pitcrew.api.errors import PitcrewError

__version__ = distribution.version()  # of the distribution that ships it

__all__ = ["PitcrewError", "__version__"]

"""gpuhealth: node-local GPU health checks, independent of Kubernetes.

What is named here is the library's public surface: :func:`check` for one
answer now, :class:`Checker` for an agent that checks again and again, the
report types, the error root, and the parsers of real tools' output.
Everything else is reached through its module. Importing ``gpuhealth`` loads
neither NVML nor PyTorch: each is imported when a check first needs it.
"""

from gpuhealth import distribution
from gpuhealth.checks import Expectations
from gpuhealth.errors import GpuhealthError
from gpuhealth.parsers import ParseError, dcgm_diag, kmsg, nccl_tests
from gpuhealth.report import CheckResult, CheckStatus, FaultClass, RecommendedAction, Report
from gpuhealth.runner import Checker
from gpuhealth.sweep import check

__version__ = distribution.version()  # of the distribution that ships it

__all__ = [
    "CheckResult",
    "CheckStatus",
    "Checker",
    "Expectations",
    "FaultClass",
    "GpuhealthError",
    "ParseError",
    "RecommendedAction",
    "Report",
    "__version__",
    "check",
    "dcgm_diag",
    "kmsg",
    "nccl_tests",
]

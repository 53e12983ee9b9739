"""What a GPU backend is: something that samples a node.

Two implementations: :class:`gpuhealth.backends.nvml.NvmlBackend` (real GPUs
through NVML, kernel log for XIDs, sysfs for InfiniBand) and
:class:`gpuhealth.backends.sim.SimBackend`. Checks never see which one they
got, which is what lets the simulated fleet exercise the real check logic.
"""

from __future__ import annotations

from typing import Protocol

from gpuhealth.errors import GpuhealthError
from gpuhealth.samples import NodeSample


class BackendUnavailableError(GpuhealthError, RuntimeError):
    """The backend cannot run on this machine (no driver, no library)."""


class Backend(Protocol):
    name: str

    def sample(self) -> NodeSample:
        """Read everything once; XID events are those seen since the last call."""
        ...

    def release(self) -> None:
        """Close every handle on the GPUs (a GPU reset is refused while any process
        holds one); nothing is sampled until :meth:`reacquire`."""
        ...

    def reacquire(self) -> None:
        """Open the GPUs again after :meth:`release`; raises
        :class:`BackendUnavailableError` while they cannot be opened (the driver is
        still starting after a reset), so the caller tries again later."""
        ...

    def close(self) -> None: ...

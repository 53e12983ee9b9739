"""How long things take in the simulated world: every duration the model samples.

Each is a log-normal given by its median and 90th percentile, the usual shape of
repair and response times (most are quick, a few take very long, none is
negative). The figures are stated assumptions unless a source is named; the
table in docs/goodput.md ("The simulator") lists them with their reasons, and
the CLI's flags override the ones a user is most likely to know better.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from pitcrew.api.policy import RemediationAction

MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0
YEAR = 365 * DAY
_Z90 = 1.2815515655446004
"""The standard normal's 90th percentile."""


@dataclass(frozen=True)
class LogNormal:
    median: float
    """Seconds."""
    p90: float

    @property
    def sigma(self) -> float:
        return math.log(self.p90 / self.median) / _Z90 if self.p90 > self.median else 0.0

    def draw(self, rng: random.Random) -> float:
        return self.at(rng.gauss(0.0, 1.0))

    def at(self, z: float) -> float:
        """The value ``z`` standard deviations from the median (of the log)."""
        return self.median * math.exp(self.sigma * z)

    @property
    def mean(self) -> float:
        return self.median * math.exp(self.sigma**2 / 2)


def spread(median: float, factor: float) -> LogNormal:
    """A log-normal whose 90th percentile is ``factor`` times its median."""
    return LogNormal(median, median * factor)


# What Pitcrew's remediators take, from the start of the rung to the evidence.
RESET_GPU = LogNormal(3 * MINUTE, 6 * MINUTE)
"""The reset Job is scheduled and pulls its image (about a minute), ``nvidia-smi -r``
on idle GPUs takes seconds to a minute."""
REBOOT = LogNormal(12 * MINUTE, 20 * MINUTE)
"""Power cycle, POST of an 8-GPU server with terabytes of memory, OS, driver, fabric
manager, kubelet Ready: ten to twenty minutes."""
REIMAGE = LogNormal(2 * HOUR, 4 * HOUR)
"""PXE install of the OS image and the GPU stack, then a reboot."""
REMEDIATOR = {
    RemediationAction.RESET_GPU: RESET_GPU,
    RemediationAction.REBOOT: REBOOT,
    RemediationAction.REIMAGE: REIMAGE,
    RemediationAction.CLUSTER_API: REIMAGE,
}
"""A Cluster API rung reprovisions the machine: as long as a reimage. A webhook rung
hands the node to people, who take as long as a person does (:mod:`.people`)."""

# What people take (the baseline, and the faults Pitcrew cannot see).
CABLE = LogNormal(4 * HOUR, 24 * HOUR)
"""A technician reseats or replaces a cable or transceiver: hours, a day if the
part or the data-centre shift is not there."""
GPU_RMA = LogNormal(3 * DAY, 7 * DAY)
"""A GPU or its baseboard is replaced under RMA: days."""
HOST_PART = LogNormal(1 * DAY, 3 * DAY)
"""An SSD, PSU, DIMM, CPU or board from the site's stock: about a day."""
MAINTENANCE = LogNormal(2 * HOUR, 6 * HOUR)
"""A host taken for maintenance without warning comes back by itself."""

# Probe Jobs (validation and periodic verification), by suite.
PROBE = {
    "quick": LogNormal(2 * MINUTE, 4 * MINUTE),
    "standard": LogNormal(8 * MINUTE, 12 * MINUTE),
    "burn-in": LogNormal(20 * MINUTE, 25 * MINUTE),
}

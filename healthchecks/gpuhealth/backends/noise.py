"""How a healthy GPU's readings move: the noise of the simulated backend.

Real NVML never returns the same sample twice. Temperature wanders around a
mean that follows the load, power and SM clocks jump with every kernel,
correctable ECC errors and PCIe replays tick now and then on perfectly good
hardware, and the driver answers ``NVML_ERROR_UNKNOWN`` or takes seconds for a
call once in a while. A simulated fleet that reads constant values hides
every bug that depends on this: an agent that writes on every reading, a rate
check that alarms on one tick, a transient error counted as a failure. So the
simulated backend is noisy unless a test asks for exact values
(``SimBackend(noise=0)``).

Everything is drawn from a generator seeded by the node's name (and
:attr:`Noise.seed`), and evolves with the backend's clock, not with the
number of calls: an accelerated clock gives a day of noise in seconds, and
the same seed gives the same day.

The levels are chosen to stay inside every default threshold of a healthy
GPU (a correctable error every couple of hours, a few PCIe replays an hour,
temperature at least 9 C below slowdown), because that is what healthy
fleets show; a fault of docs/faults.md is what crosses them.
"""

from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass, field

from gpuhealth.models import GpuModel

IDLE_TEMP_C = 34.0
LOADED_HEADROOM_C = 17.0
"""A loaded healthy GPU runs this far below its slowdown temperature, on average."""
TEMP_SPREAD_C = 6.0
"""The random walk never leaves mean +/- this."""
TEMP_PULL_PER_MIN = 0.3
"""Share of the distance to the mean the walk closes per minute (mean reversion)."""
TEMP_STEP_C_PER_SQRT_MIN = 1.2
IDLE_SM_CLOCK_MHZ = 345.0
BUSY_DWELL_MIN = 45.0
"""Mean minutes a node's load stays in one state (busy or idle) when it is not set."""


@dataclass(frozen=True)
class Noise:
    """The hostility of the simulated world; ``scale`` multiplies every rate and spread.

    ``Noise.of(0)`` is exact: constant readings, no counter ticks, no NVML
    errors, no slow calls. Rates are per GPU (or per port, per link) and hour
    of simulated time, except the NVML ones, which are per sample.
    """

    scale: float = 1.0
    seed: int = 0
    sbe_per_hour: float = 0.5
    pcie_replays_per_hour: float = 3.0
    nvlink_crc_per_hour: float = 0.2
    ib_symbol_errors_per_hour: float = 0.3
    nvml_field_error_rate: float = 0.002
    """Chance per GPU per sample that one field read fails (``NVML_ERROR_UNKNOWN``)."""
    nvml_sample_error_rate: float = 0.0005
    """Chance per sample that the whole read fails (the driver is busy or restarting)."""
    slow_call_rate: float = 0.005
    """Chance per sample that NVML takes :attr:`slow_call_s` to answer."""
    slow_call_s: float = 1.5

    @classmethod
    def of(cls, value: Noise | float) -> Noise:
        return value if isinstance(value, Noise) else cls(scale=float(value))

    @property
    def exact(self) -> bool:
        return self.scale <= 0


FIELDS_THAT_FAIL = ("temperature", "power", "ecc", "remap", "pcie", "nvlink", "clocks", "fabric")
"""Reads a transient NVML error may hit; each maps to the check that reports ``error``."""


@dataclass
class GpuNoise:
    """The moving state of one GPU: where its temperature is, its counters' ticks."""

    temperature_c: float
    sbe: int = 0
    pcie_replays: int = 0
    nvlink_crc: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Reading:
    """What noise adds to one GPU for one sample."""

    temperature_c: float
    power_w: float
    sm_clock_mhz: float
    sbe: int
    pcie_replays: int
    nvlink_crc: dict[int, int]
    failed_field: str | None


class NoiseSource:
    """The noise of one simulated node, advanced by the backend's clock."""

    def __init__(self, noise: Noise, *, node: str, model: GpuModel, gpus: int, ports: int) -> None:
        self.noise = noise
        self.model = model
        seed = zlib.crc32(f"{noise.seed}/{node}".encode())
        self.rng = random.Random(seed)  # noqa: S311 - reproducible noise, not secrets
        self.busy = self.rng.random() < 0.5
        self.load: float | None = None
        """Set by the owner (a simulated agent that sees the node's pods); ``None``
        lets the node alternate between busy and idle on its own."""
        self.gpus = [GpuNoise(temperature_c=self.mean_temperature(i)) for i in range(gpus)]
        self.ib_symbols = [0] * ports

    def current_load(self) -> float:
        if self.load is not None:
            return self.load
        return 0.9 if self.busy else 0.0

    def mean_temperature(self, index: int) -> float:
        loaded = self.model.slowdown_temp_c - LOADED_HEADROOM_C
        idle = IDLE_TEMP_C + index % 4
        return idle + (loaded - idle) * self.current_load()

    def _ticks(self, per_hour: float, minutes: float) -> int:
        """Poisson arrivals over ``minutes`` (inversion by sequential search, fine for
        the small means of a healthy GPU)."""
        mean = per_hour * self.noise.scale * minutes / 60.0
        if mean <= 0:
            return 0
        limit, count, product = math.exp(-mean), 0, self.rng.random()
        while product > limit:
            count += 1
            product *= self.rng.random()
        return count

    def advance(self, minutes: float) -> None:
        """Move every GPU's state forward by ``minutes`` of simulated time."""
        if self.noise.exact or minutes <= 0:
            return
        if self.load is None and self.rng.random() < 1 - math.exp(-minutes / BUSY_DWELL_MIN):
            self.busy = not self.busy
        pull = 1 - math.exp(-TEMP_PULL_PER_MIN * minutes)
        step = TEMP_STEP_C_PER_SQRT_MIN * math.sqrt(min(minutes, 60.0)) * self.noise.scale
        for index, gpu in enumerate(self.gpus):
            mean = self.mean_temperature(index)
            walked = gpu.temperature_c + (mean - gpu.temperature_c) * pull
            walked += self.rng.gauss(0.0, step)
            spread = TEMP_SPREAD_C * min(self.noise.scale, 1.0)
            gpu.temperature_c = min(max(walked, mean - spread), mean + spread)
            gpu.sbe += self._ticks(self.noise.sbe_per_hour, minutes)
            gpu.pcie_replays += self._ticks(self.noise.pcie_replays_per_hour, minutes)
            for link in range(self.model.nvlink_links):
                ticks = self._ticks(self.noise.nvlink_crc_per_hour, minutes)
                if ticks:
                    gpu.nvlink_crc[link] = gpu.nvlink_crc.get(link, 0) + ticks
        for port in range(len(self.ib_symbols)):
            self.ib_symbols[port] += self._ticks(self.noise.ib_symbol_errors_per_hour, minutes)

    def reading(self, index: int) -> Reading:
        """One GPU's noisy reading now (power and clocks are drawn fresh each time)."""
        gpu = self.gpus[index]
        load = self.current_load()
        tdp, boost = self.model.tdp_w, self.model.max_sm_clock_mhz
        if self.noise.exact:
            return Reading(
                temperature_c=IDLE_TEMP_C + 8 + index % 4,
                power_w=tdp * 0.45,
                sm_clock_mhz=boost,
                sbe=0,
                pcie_replays=0,
                nvlink_crc={},
                failed_field=None,
            )
        scale = self.noise.scale
        power = tdp * (0.1 + 0.78 * load) + self.rng.gauss(0.0, 0.04 * tdp * scale)
        clock = IDLE_SM_CLOCK_MHZ + (boost - IDLE_SM_CLOCK_MHZ) * min(load / 0.8, 1.0)
        clock -= abs(self.rng.gauss(0.0, 0.03 * boost * scale)) if load > 0 else 0.0
        failed = None
        if self.rng.random() < self.noise.nvml_field_error_rate * scale:
            failed = self.rng.choice(FIELDS_THAT_FAIL)
        return Reading(
            temperature_c=round(gpu.temperature_c, 1),
            power_w=round(min(max(power, 0.05 * tdp), tdp), 1),
            sm_clock_mhz=round(min(max(clock, IDLE_SM_CLOCK_MHZ), boost)),
            sbe=gpu.sbe,
            pcie_replays=gpu.pcie_replays,
            nvlink_crc=dict(gpu.nvlink_crc),
            failed_field=failed,
        )

    def sample_fails(self) -> bool:
        return not self.noise.exact and (
            self.rng.random() < self.noise.nvml_sample_error_rate * self.noise.scale
        )

    def slow_call_s(self) -> float:
        if self.noise.exact or self.rng.random() >= self.noise.slow_call_rate * self.noise.scale:
            return 0.0
        return self.noise.slow_call_s * self.rng.uniform(0.5, 1.5)

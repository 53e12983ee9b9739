"""Thresholds of the passive checks, as one table with defaults.

Names are stable (``ecc.sbe_per_hour_warn``) because a GPUHealthPolicy
overrides them by name (``spec.checks.thresholds``); an unknown name is an
error, so a typo never silently keeps the default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gpuhealth.errors import GpuhealthError


@dataclass(frozen=True)
class Threshold:
    default: float
    unit: str
    description: str


# fmt: off
DEFAULTS: Mapping[str, Threshold] = MappingProxyType({
    "ecc.sbe_per_hour_warn": Threshold(100, "errors/h", "correctable ECC rate worth watching"),
    "ecc.sbe_per_hour_fail": Threshold(5000, "errors/h", "correctable ECC storm: drain and reset"),
    "ecc.dbe_max": Threshold(0, "errors", "uncorrectable ECC errors since the driver loaded"),
    "remap.uncorrectable_max": Threshold(512, "rows", "rows remapped for uncorrectable errors"),
    "retired_pages.max": Threshold(60, "pages", "retired pages (pre-Ampere page retirement)"),
    "clocks.hw_slowdown_grace_s": Threshold(60, "s", "hardware slowdown tolerated before failing"),
    "thermal.margin_warn_c": Threshold(5, "C", "least distance to the slowdown temperature"),
    "pcie.replay_per_min_warn": Threshold(100, "replays/min", "PCIe replay rate worth watching"),
    "nvlink.errors_per_min_warn": Threshold(10, "errors/min", "NVLink link errors to watch"),
    "nvlink.errors_per_min_fail": Threshold(100, "errors/min", "NVLink error storm on one link"),
    "xid.app_repeat_count": Threshold(3, "events", "application XIDs on one GPU that escalate"),
    "xid.app_repeat_window_s": Threshold(3600, "s", "window for counting application XIDs"),
    "ib.expected_rate_gbps": Threshold(400, "Gb/s", "rate every InfiniBand/RoCE port must run at"),
    "ib.link_downed_per_hour_fail": Threshold(3, "events/h", "link-down events that mean flapping"),
    "ib.symbol_errors_per_min_warn": Threshold(10, "errors/min", "physical-layer errors to watch"),
    "fabric.registration_grace_s": Threshold(600, "s", "fabric registration pending: then fatal"),
    "rate.window_s": Threshold(600, "s", "window over which counter rates are computed"),
    "rate.min_span_s": Threshold(120, "s", "least span a rate divides by: a tick is no storm"),
})
# fmt: on


class UnknownThresholdError(GpuhealthError, KeyError):
    """A threshold override names no known threshold."""


class Thresholds:
    """Defaults with overrides applied."""

    def __init__(self, overrides: Mapping[str, float] | None = None) -> None:
        unknown = sorted(set(overrides or {}) - set(DEFAULTS))
        if unknown:
            raise UnknownThresholdError(
                f"unknown threshold(s) {', '.join(unknown)}; known: {', '.join(sorted(DEFAULTS))}"
            )
        self._values = {name: t.default for name, t in DEFAULTS.items()} | dict(overrides or {})

    def __getitem__(self, name: str) -> float:
        return self._values[name]

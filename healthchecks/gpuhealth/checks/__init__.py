"""The passive checks, in the order they run.

Passive checks are cheap and safe while jobs run: they only read counters.
Each is a function of a :class:`~gpuhealth.checks.context.CheckContext`; this
table maps the names a policy can disable to the functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from gpuhealth.checks.clocks import check_clock_events, check_thermal_margin
from gpuhealth.checks.context import CheckContext, Expectations, Memory
from gpuhealth.checks.devices import check_gpu_count, check_lost
from gpuhealth.checks.fabric import check_fabric
from gpuhealth.checks.links import check_nvlink, check_pcie
from gpuhealth.checks.memory import check_ecc, check_retired_pages, check_row_remap
from gpuhealth.checks.network import check_ib_ports
from gpuhealth.checks.nvswitch import check_sxid
from gpuhealth.checks.software import check_modes, check_versions
from gpuhealth.checks.xid import check_xid
from gpuhealth.report import CheckResult

Check = Callable[[CheckContext], list[CheckResult]]

PASSIVE: Mapping[str, Check] = MappingProxyType(
    {
        "gpu-count": check_gpu_count,
        "gpu-lost": check_lost,
        "xid": check_xid,
        "sxid": check_sxid,
        "ecc": check_ecc,
        "row-remap": check_row_remap,
        "retired-pages": check_retired_pages,
        "clock-events": check_clock_events,
        "thermal-margin": check_thermal_margin,
        "pcie": check_pcie,
        "nvlink": check_nvlink,
        "fabric": check_fabric,
        "versions": check_versions,
        "gpu-modes": check_modes,
        "ib": check_ib_ports,
    }
)

__all__ = ["PASSIVE", "Check", "CheckContext", "Expectations", "Memory"]

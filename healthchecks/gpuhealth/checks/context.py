"""What a passive check sees: this sample, the thresholds, and memory across runs.

Checks are functions ``(CheckContext) -> list[CheckResult]``. Everything that
must persist between two runs of the agent (counter history, when a throttle
reason was first seen, recent application XIDs) lives in :class:`Memory`,
owned by the caller, so the check functions stay free of hidden state.
"""

from __future__ import annotations

import datetime
from collections import deque
from dataclasses import dataclass, field

from gpuhealth.history import CounterHistory
from gpuhealth.models import GpuModel
from gpuhealth.report import CheckResult, CheckStatus, FaultClass, RecommendedAction
from gpuhealth.samples import ClockEvent, GpuSample, NodeSample
from gpuhealth.thresholds import Thresholds


@dataclass
class Memory:
    counters: CounterHistory
    throttle_since: dict[tuple[int, ClockEvent], datetime.datetime] = field(default_factory=dict)
    fabric_pending_since: dict[int, datetime.datetime] = field(default_factory=dict)
    app_xids: dict[int | None, deque[tuple[datetime.datetime, int]]] = field(default_factory=dict)
    latched_xids: dict[tuple[int | None, int], CheckResult] = field(default_factory=dict)
    """Fatal and degraded XID findings, kept until :meth:`clear_latched` (after a
    repair; a reboot restarts the agent and clears them too), because the
    driver logs an XID once while the fault lasts."""

    def clear_latched(self) -> None:
        self.latched_xids.clear()
        self.app_xids.clear()


@dataclass(frozen=True)
class Expectations:
    """What this node should look like; ``None`` means "do not check"."""

    gpus: int | None = None
    model: GpuModel | None = None
    driver_version: str | None = None
    ib_ports: int | None = None
    mig_enabled: bool = False


@dataclass(frozen=True)
class CheckContext:
    sample: NodeSample
    thresholds: Thresholds
    memory: Memory
    expect: Expectations

    @property
    def now(self) -> datetime.datetime:
        return self.sample.time

    def rate_per_minute(self, key: tuple[object, ...], value: float) -> float | None:
        rate = self.memory.counters.rate_per_second(key, now=self.now, value=value)
        return None if rate is None else rate * 60.0

    def increase_per_hour(self, key: tuple[object, ...], value: float) -> float | None:
        """Events counted over the last hour (see :meth:`CounterHistory.increase`)."""
        return self.memory.counters.increase(
            key, now=self.now, value=value, within=datetime.timedelta(hours=1)
        )


def unread(name: str, gpu: GpuSample, *reads: str) -> CheckResult | None:
    """``error`` when NVML failed one of the ``reads`` this check needs, else ``None``.

    A failed read is no evidence about the GPU: the check says it could not
    run, keeps its memory (rates, throttle timers) untouched, and runs again
    at the next sweep. Judging the missing values instead (no NVLink links, a
    counter of 0) turns every transient ``NVML_ERROR_UNKNOWN`` into a false
    failure or a false rate.
    """
    failed = [gpu.errors[r] for r in reads if r in gpu.errors]
    if not failed:
        return None
    return result(name, CheckStatus.ERROR, gpu=gpu.identity.index, message="; ".join(failed))


def result(
    name: str,
    status: CheckStatus,
    *,
    gpu: int | None = None,
    observed: float | None = None,
    threshold: float | None = None,
    unit: str = "",
    fault_class: FaultClass = FaultClass.NONE,
    action: RecommendedAction = RecommendedAction.NONE,
    message: str = "",
) -> CheckResult:
    """A CheckResult; passing results carry no fault class or action."""
    if status in (CheckStatus.PASS, CheckStatus.SKIPPED, CheckStatus.ERROR):
        fault_class, action = FaultClass.NONE, RecommendedAction.NONE
    return CheckResult(
        name=name,
        status=status,
        gpu=gpu,
        observed=observed,
        threshold=threshold,
        unit=unit,
        fault_class=fault_class,
        action=action,
        message=message,
    )

"""On a noisy healthy node the agent writes heartbeats only, and never a failure.

Readings move every sweep, counters tick, NVML fails a read now and then and
sometimes the whole sweep: none of it is a finding, so none of it is a write.
Time is virtual; the agent's API calls are counted, not sent.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from gpuhealth.backends.noise import Noise
from gpuhealth.backends.sim import SimBackend
from gpuhealth.checks import Expectations
from gpuhealth.faults import parse_faults
from gpuhealth.models import get_model
from gpuhealth.report import CheckStatus
from gpuhealth.runner import Checker
from pitcrew.node import agent as agent_module
from pitcrew.node.agent import AgentCore

START = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
SWEEP = datetime.timedelta(seconds=30)
HEARTBEAT = datetime.timedelta(minutes=5)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime.datetime:
        return self.now


def fleet_node(
    monkeypatch: pytest.MonkeyPatch, noise: Noise, clock: Clock
) -> tuple[AgentCore, list[Any]]:
    written: list[Any] = []
    monkeypatch.setattr(agent_module.gpunodes, "ensure", lambda *_, **__: None)
    monkeypatch.setattr(
        agent_module.gpunodes, "apply_status", lambda _api, **kwargs: written.append(kwargs)
    )
    model = get_model("H100")
    backend = SimBackend(node="n7", model=model, clock=clock, noise=noise, sleep=lambda _: None)
    checker = Checker(
        backend=backend, node="n7", expect=Expectations(gpus=8, model=model, ib_ports=8)
    )
    core = AgentCore(
        api=None,  # type: ignore[arg-type]
        node="n7",
        node_uid="u",
        checker=checker,
        heartbeat=HEARTBEAT,
        clock=clock,
    )
    return core, written


def sweep(core: AgentCore, clock: Clock, hours: float) -> list[Any]:
    reports = []
    for _ in range(int(hours * 3600 / SWEEP.total_seconds())):
        clock.now += SWEEP
        core.tick()
        reports.append(core.checker.last_sample)
    return reports


FAIL = "fail"
HOSTILE = Noise(
    scale=1.0,
    nvml_field_error_rate=0.3,
    nvml_sample_error_rate=0.05,
    slow_call_rate=0.05,
)


@pytest.mark.parametrize("noise", [Noise(), HOSTILE], ids=["default", "hostile"])
def test_a_noisy_healthy_node_writes_only_its_heartbeat(
    monkeypatch: pytest.MonkeyPatch, noise: Noise
) -> None:
    clock = Clock()
    core, written = fleet_node(monkeypatch, noise, clock)
    samples = sweep(core, clock, hours=4)
    temperatures = {s.gpus[0].temperature_c for s in samples if s and s.gpus}
    assert len(temperatures) > 10  # the readings really move
    assert len(written) <= 4 * 12 + 1  # one heartbeat per 5 minutes, nothing else
    for write in written:
        assert write["status"]["gpuCount"] == 8  # a failed sweep's heartbeat keeps the GPUs
        failing = [
            r for r in write["status"]["checks"]["results"] if r["status"] in ("fail", "warn")
        ]
        assert failing == []


def test_a_fault_under_hostile_noise_is_written_at_once_and_stays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    core, written = fleet_node(monkeypatch, HOSTILE, clock)
    sweep(core, clock, hours=0.5)
    before = len(written)
    core.checker.backend.set_faults(parse_faults('[{"type": "nvlink-down", "gpu": 2, "link": 4}]'))  # type: ignore[attr-defined]
    sweep(core, clock, hours=1)
    assert len(written) <= before + 1 + 12 + 1  # the change, then heartbeats only
    late = [r for r in written[before:] if r["status"]["checks"]["results"]]
    failing = [
        [
            (c["name"], c.get("gpu"))
            for c in w["status"]["checks"]["results"]
            if c["status"] == "fail"
        ]
        for w in late
    ]
    # Every write after the fault carries it, except one whose sweep could not read NVLink
    # (that write says "error" for the check, never "pass").
    for write, fails in zip(late, failing, strict=True):
        results = write["status"]["checks"]["results"]
        nvlink = [c for c in results if c["name"] == "nvlink" and c.get("gpu") == 2]
        assert ("nvlink", 2) in fails or all(c["status"] == CheckStatus.ERROR for c in nvlink)

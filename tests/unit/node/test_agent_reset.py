"""The agent lets go of NVML for a GPU reset, says so, and takes it back after it.

``nvidia-smi -r`` is refused "in use by another client" while any process holds the
GPUs open, the agent's NVML handles included. A fake pynvml counts ``nvmlInit`` and
``nvmlShutdown``: the agent must leave NVML shut down while the operator's reset rung
is pending, sample nothing meanwhile, and open it again (with a backoff while the driver
does not answer) once the rung is over; a GPU the reset lost is a finding, not a crash.
"""

from __future__ import annotations

import datetime
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuhealth.backends.nvml import NvmlBackend
from gpuhealth.checks import Expectations
from gpuhealth.report import CheckStatus
from gpuhealth.runner import Checker
from pitcrew.node import agent as agent_module
from pitcrew.node.agent import REACQUIRE_FIRST, AgentCore
from support.fake_pynvml import fake_pynvml

T0 = datetime.datetime(2026, 12, 1, 12, tzinfo=datetime.UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)


def gpunode(action: str = "reset-gpu", *, key: str = "fix-1", **rung: str) -> dict[str, Any]:
    remediation = {"action": action, "reference": key, **rung}
    return {"metadata": {"generation": 1}, "status": {"remediation": remediation}}


NO_RUNG: dict[str, Any] = {"metadata": {"generation": 1}, "status": {}}


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> Any:
    fake = fake_pynvml(lost=set(), broken_ecc=set())
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    written: list[dict[str, Any]] = []
    monkeypatch.setattr(agent_module.gpunodes, "ensure", lambda *_, **__: None)
    monkeypatch.setattr(
        agent_module.gpunodes, "apply_status", lambda _api, **kw: written.append(kw["status"])
    )
    return written


def agent(tmp_path: Path, clock: Clock) -> AgentCore:
    backend = NvmlBackend(kernel_log=None, sysfs_ib=tmp_path / "none")
    checker = Checker(backend=backend, node="n0", expect=Expectations(gpus=2))
    return AgentCore(
        api=None,  # type: ignore[arg-type]
        node="n0",
        node_uid="u",
        checker=checker,
        heartbeat=datetime.timedelta(minutes=5),
        clock=clock,
    )


def test_a_pending_reset_shuts_nvml_down_once_and_says_so_at_once(
    nvml: Any, writes: list[dict[str, Any]], tmp_path: Path
) -> None:
    core = agent(tmp_path, Clock())
    core.tick()
    assert (nvml.inits, nvml.shutdowns) == (1, 0)
    core.follow(gpunode())
    assert (nvml.inits, nvml.shutdowns) == (1, 1)  # every handle closed
    assert writes[-1]["checks"]["released"] == "fix-1"
    core.follow(gpunode())  # the same rung, seen again: nothing more
    assert nvml.shutdowns == 1
    assert len(writes) == 2


def test_no_sweep_touches_nvml_while_released(
    nvml: Any, writes: list[dict[str, Any]], tmp_path: Path
) -> None:
    clock = Clock()
    core = agent(tmp_path, clock)
    core.tick()
    core.follow(gpunode())
    nvml.nvmlDeviceGetCount = lambda: pytest.fail("NVML read while released")
    clock.advance(600)
    assert core.tick()  # the heartbeat, still saying released
    assert writes[-1]["checks"]["released"] == "fix-1"
    assert not core.checker.backend.wait_for_xid(0.01)  # type: ignore[attr-defined]


def test_the_next_rung_of_the_reset_keeps_nvml_closed_under_its_own_key(
    nvml: Any, writes: list[dict[str, Any]], tmp_path: Path
) -> None:
    core = agent(tmp_path, Clock())
    core.follow(gpunode(key="fix-1"))
    core.follow(gpunode(key="fix-2"))
    assert nvml.shutdowns == 1
    assert writes[-1]["checks"]["released"] == "fix-2"


@pytest.mark.parametrize(
    "after",
    [
        gpunode(confirmed="reset Job fix-1 succeeded"),
        gpunode(error="forbidden"),
        gpunode("reboot", key="fix-2"),
        NO_RUNG,
    ],
    ids=["confirmed", "failed to start", "next rung", "no rung"],
)
def test_nvml_is_opened_again_once_the_reset_is_over(
    nvml: Any, writes: list[dict[str, Any]], tmp_path: Path, after: dict[str, Any]
) -> None:
    core = agent(tmp_path, Clock())
    core.tick()
    core.follow(gpunode())
    core.follow(after)
    assert core.woken.is_set()  # the loop does not sleep out its interval
    assert core.tick()  # the first report after a reset is written
    assert (nvml.inits, nvml.shutdowns) == (2, 1)
    assert writes[-1]["checks"]["released"] == ""
    assert "error" not in {r["status"] for r in writes[-1]["checks"]["results"]}  # sampled


def test_a_driver_not_back_yet_is_tried_again_with_a_backoff_and_reported_meanwhile(
    nvml: Any, writes: list[dict[str, Any]], tmp_path: Path
) -> None:
    clock = Clock()
    core = agent(tmp_path, clock)
    core.tick()
    core.follow(gpunode())
    nvml.init_fails = True
    core.follow(NO_RUNG)
    core.tick(force=True)  # no crash: the sweep says the backend cannot be read
    assert writes[-1]["checks"]["results"][-1]["status"] == CheckStatus.ERROR.value
    assert core.next_sweep() == T0 + REACQUIRE_FIRST
    clock.advance(REACQUIRE_FIRST.total_seconds())
    core.tick()
    assert core.next_sweep() == clock.now + 2 * REACQUIRE_FIRST  # doubled
    nvml.init_fails = False
    clock.advance(2 * REACQUIRE_FIRST.total_seconds())
    core.tick()
    assert core.reacquire_at is None
    assert nvml.inits == 2


def test_a_gpu_the_reset_lost_is_reported_not_a_crash(
    nvml: Any, writes: list[dict[str, Any]], tmp_path: Path
) -> None:
    core = agent(tmp_path, Clock())
    core.tick()
    core.follow(gpunode())
    nvml.gpus = 1  # one GPU did not come back from the reset
    core.follow(NO_RUNG)
    assert core.tick()
    count = next(r for r in writes[-1]["checks"]["results"] if r["name"] == "gpu-count")
    assert count["status"] == CheckStatus.FAIL.value


def test_a_release_the_apiserver_did_not_take_is_said_at_the_next_sweep(
    nvml: Any, writes: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = agent(tmp_path, Clock())
    core.tick()

    def refuse(_api: object, **_: object) -> None:
        raise ConnectionError("apiserver restarting")

    monkeypatch.setattr(agent_module.gpunodes, "apply_status", refuse)
    core.follow(gpunode())  # the watch thread goes on
    assert nvml.shutdowns == 1
    monkeypatch.setattr(
        agent_module.gpunodes, "apply_status", lambda _api, **kw: writes.append(kw["status"])
    )
    assert core.tick()  # not waiting for the heartbeat
    assert writes[-1]["checks"]["released"] == "fix-1"


def test_an_agent_started_with_a_reset_pending_says_what_gpus_it_has_before_releasing(
    nvml: Any, writes: list[dict[str, Any]], tmp_path: Path
) -> None:
    """A restarted agent finds the rung at once; its "released" status must not read
    as a node without GPUs (the agent's apply replaces all of its fields)."""
    core = agent(tmp_path, Clock())
    core.follow(gpunode())
    assert nvml.shutdowns == 1
    (written,) = writes
    assert (written["checks"]["released"], written["gpuCount"]) == ("fix-1", 2)

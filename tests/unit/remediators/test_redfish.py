"""A reboot never powers a node off."""

from __future__ import annotations

from typing import Any

import pytest
import sushy

from pitcrew.api.policy import GPUHealthPolicySpec
from pitcrew.remediators import RemediationError, bmc
from pitcrew.remediators.redfish import RedfishReboot
from support.remediation_requests import reboot_request

SPEC = GPUHealthPolicySpec.model_validate(
    {"nodeSelector": {"matchLabels": {"a": "b"}}, "remediation": {"redfish": {}}}
)


class System:
    def __init__(self, allowed: list[str]) -> None:
        self.allowed = allowed
        self.resets: list[str] = []

    def get_allowed_reset_system_values(self) -> list[str]:
        return self.allowed

    def reset_system(self, value: Any) -> None:
        self.resets.append(getattr(value, "value", str(value)))


def reboot(monkeypatch: pytest.MonkeyPatch, allowed: list[str]) -> tuple[System, str]:
    system = System(allowed)

    class Connection:
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def get_system(self, path: str) -> System:
            return system

    monkeypatch.setattr(sushy, "Sushy", Connection)
    monkeypatch.setattr(
        bmc,
        "resolve",
        lambda api, request, namespace: bmc.Bmc(
            "https://10.0.0.1", "/redfish/v1/Systems/1", "u", "p", "inventory"
        ),
    )
    request = reboot_request(SPEC)
    return system, RedfishReboot(api=None, namespace="ns").start(request)  # type: ignore[arg-type]


def test_a_forced_restart_is_preferred(monkeypatch: pytest.MonkeyPatch) -> None:
    system, said = reboot(monkeypatch, ["On", "ForceOff", "GracefulRestart", "ForceRestart"])
    assert system.resets == ["ForceRestart"]
    assert "ForceRestart" in said


def test_a_bmc_that_offers_no_restart_is_refused_not_powered_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(RemediationError, match="offers no restart"):
        reboot(monkeypatch, ["On", "ForceOff"])

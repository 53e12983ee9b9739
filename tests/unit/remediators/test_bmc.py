"""BMC addresses come from what the cluster admin owns, never from what a node writes.

A tenant with root on a GPU node can annotate its own Node: these tests play that
tenant against the resolution the Redfish remediator runs before it connects.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from pitcrew.api.policy import GPUHealthPolicySpec
from pitcrew.remediators import RemediationError, bmc
from support.remediation_requests import reboot_request

ROGUE = "https://203.0.113.9:8443"
INVENTORY = {"endpoint": "https://10.20.0.7", "system": "/redfish/v1/Systems/1"}


def policy(**redfish: Any) -> GPUHealthPolicySpec:
    return GPUHealthPolicySpec.model_validate(
        {
            "nodeSelector": {"matchLabels": {"a": "b"}},
            "remediation": {"redfish": {"credentialsSecret": {"name": "creds"}, **redfish}},
        }
    )


def b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


SECRETS = {
    "creds": {"username": b64("fleet-admin"), "password": b64("fleet-secret")},
    "inventory": {
        "gpu-7": b64(json.dumps(INVENTORY)),
        "gpu-8": b64(json.dumps({**INVENTORY, "username": "bmc8", "password": "pw8"})),
        "gpu-9": b64("not json"),
    },
}
ANNOTATED = {
    "pitcrew.dev/bmc-endpoint": ROGUE,
    "pitcrew.dev/bmc-system": "/redfish/v1/Systems/1",
}


@pytest.fixture(autouse=True)
def secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bmc, "_secret", lambda api, ref, namespace: SECRETS[ref.name])


def resolve(spec: GPUHealthPolicySpec, annotations: dict[str, str], node: str = "gpu-7") -> bmc.Bmc:
    request = reboot_request(spec, node=node, annotations=annotations)
    return bmc.resolve(None, request, namespace="ns")  # type: ignore[arg-type]


def test_the_inventory_wins_over_what_the_node_says() -> None:
    found = resolve(policy(inventorySecret={"name": "inventory"}), ANNOTATED)
    assert (found.endpoint, found.username, found.source) == (
        "https://10.20.0.7",
        "fleet-admin",
        "inventory",
    )


def test_an_inventory_entry_may_carry_its_own_credentials() -> None:
    found = resolve(policy(inventorySecret={"name": "inventory"}), {}, node="gpu-8")
    assert (found.username, found.password) == ("bmc8", "pw8")


def test_node_annotations_are_refused_by_default() -> None:
    with pytest.raises(RemediationError, match=r"not trusted.*no request was sent") as refused:
        resolve(policy(), ANNOTATED)
    assert ROGUE in str(refused.value)


def test_a_node_missing_from_the_inventory_falls_back_only_where_allowed() -> None:
    with pytest.raises(RemediationError, match="inventory Secret ns/inventory"):
        resolve(policy(inventorySecret={"name": "inventory"}), ANNOTATED, node="gpu-1")


def test_an_annotation_outside_the_allowlist_is_refused() -> None:
    spec = policy(nodeAnnotations={"enabled": True, "allowedEndpoints": ["10.20.0.0/16"]})
    with pytest.raises(RemediationError, match=r"not in .*allowedEndpoints"):
        resolve(spec, ANNOTATED)


def test_an_annotation_inside_the_allowlist_is_used_with_the_fleet_credentials() -> None:
    spec = policy(nodeAnnotations={"enabled": True, "allowedEndpoints": ["203.0.113.0/24"]})
    found = resolve(spec, ANNOTATED)
    assert (found.endpoint, found.source) == (ROGUE, "node annotations")


@pytest.mark.parametrize(
    ("endpoint", "allowed", "ok"),
    [
        ("https://10.20.3.4", ["10.20.0.0/16"], True),
        ("https://10.21.3.4", ["10.20.0.0/16"], False),
        ("https://[fd00::5]:443", ["fd00::/64"], True),
        ("https://bmc-7.example.com", ["bmc-7.example.com"], True),
        ("https://bmc-7.example.com.evil.io", ["bmc-7.example.com"], False),
        ("https://r1.bmc.example.com", ["*.bmc.example.com"], True),
        ("https://bmc.example.com", ["*.bmc.example.com"], False),
        ("https://evilbmc.example.com", ["*.bmc.example.com"], False),
        ("https://user@10.20.0.1", ["10.20.0.0/16"], True),
        ("not a url", ["10.20.0.0/16"], False),
    ],
)
def test_endpoint_allowlist(endpoint: str, allowed: list[str], ok: bool) -> None:
    assert bmc.endpoint_allowed(endpoint, allowed) is ok


def test_a_broken_inventory_entry_is_named() -> None:
    with pytest.raises(RemediationError, match="key 'gpu-9' is not JSON"):
        resolve(policy(inventorySecret={"name": "inventory"}), {}, node="gpu-9")


def test_the_model_refuses_an_allowlist_entry_that_is_neither_cidr_nor_host() -> None:
    with pytest.raises(ValueError, match="neither a CIDR nor a lower-case host name"):
        policy(nodeAnnotations={"enabled": True, "allowedEndpoints": ["https://x/"]})


@pytest.mark.parametrize(
    ("address", "endpoint", "system"),
    [
        # The forms of Metal3's BareMetalHost documentation (spec.bmc.address).
        ("redfish://10.1.0.5/redfish/v1/Systems/1", "https://10.1.0.5", "/redfish/v1/Systems/1"),
        (
            "redfish+http://bmc.rack3.example:8000/redfish/v1/Systems/System.Embedded.1",
            "http://bmc.rack3.example:8000",
            "/redfish/v1/Systems/System.Embedded.1",
        ),
        (
            "redfish-virtualmedia+https://[fd00::7]:443/redfish/v1/Systems/1",
            "https://[fd00::7]:443",
            "/redfish/v1/Systems/1",
        ),
        (
            "idrac-redfish://10.1.0.6/redfish/v1/Systems/System.Embedded.1",
            "https://10.1.0.6",
            "/redfish/v1/Systems/System.Embedded.1",
        ),
        (
            "ilo5-redfish://10.1.0.8/redfish/v1/Systems/1",
            "https://10.1.0.8",
            "/redfish/v1/Systems/1",
        ),
    ],
)
def test_metal3_redfish_addresses_name_the_endpoint_and_system(
    address: str, endpoint: str, system: str
) -> None:
    assert bmc.metal3_address(address, "host") == (endpoint, system)


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("ipmi://10.1.0.5:623", "not a Redfish address"),
        ("10.1.0.5:623", "not a Redfish address"),
        ("idrac://10.1.0.6", "not a Redfish address"),
        ("irmc://10.1.0.7", "not a Redfish address"),
        ("redfish+ftp://10.1.0.5/redfish/v1/Systems/1", "names no host over http"),
        ("redfish://10.1.0.5", "system must be a path"),
    ],
)
def test_metal3_addresses_pitcrew_cannot_drive_are_refused(address: str, why: str) -> None:
    with pytest.raises(RemediationError, match=why):
        bmc.metal3_address(address, "BareMetalHost metal3/gpu-7")


def host(name: str, address: str, credentials: str | None = "creds") -> dict[str, Any]:
    return {
        "metadata": {"namespace": "metal3", "name": name},
        "spec": {"bmc": {"address": address, "credentialsName": credentials}, "online": True},
    }


def test_a_bare_metal_host_names_the_bmc_and_its_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found_host = host("gpu-7", "redfish://10.30.0.7/redfish/v1/Systems/1")
    monkeypatch.setattr(bmc, "_metal3_host", lambda api, spec, node: found_host)
    found = resolve(policy(metal3={"enabled": True}), ANNOTATED)
    assert (found.endpoint, found.system, found.username, found.source) == (
        "https://10.30.0.7",
        "/redfish/v1/Systems/1",
        "fleet-admin",
        "BareMetalHost metal3/gpu-7",
    )


def test_a_bare_metal_host_without_credentials_sends_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found_host = host("gpu-7", "redfish://10.30.0.7/redfish/v1/Systems/1", credentials=None)
    monkeypatch.setattr(bmc, "_metal3_host", lambda api, spec, node: found_host)
    with pytest.raises(RemediationError, match=r"no spec\.bmc\.credentialsName"):
        resolve(policy(metal3={"enabled": True}), ANNOTATED)

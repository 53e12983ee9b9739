"""Where a node's BMC is, and with which credentials: from a trusted source only.

Tenants may have root on GPU nodes, and a kubelet may annotate its own Node. A
BMC address read from the Node would let whoever owns a node point the next
reboot, and the fleet's BMC username and password with it, at a server of
theirs. So the address comes from what the cluster admin owns:

1. the **inventory**: a Secret in the operator's namespace
   (``spec.remediation.redfish.inventorySecret``), one key per node name, each a
   JSON object ``{"endpoint", "system", "username"?, "password"?}``;
2. Metal3's **BareMetalHost** (``spec.remediation.redfish.metal3``): the host in
   the configured namespace named like the node, or labelled
   ``pitcrew.dev/node=<node>``; its ``spec.bmc.address`` in one of Metal3's Redfish
   forms and the Secret its ``spec.bmc.credentialsName`` names. A node cannot
   write either: neither its name nor a host's labels are the kubelet's;
3. the Node's ``pitcrew.dev/bmc-endpoint`` and ``pitcrew.dev/bmc-system``
   annotations, **only** when the policy opts in
   (``nodeAnnotations.enabled``) and the endpoint's host is in
   ``nodeAnnotations.allowedEndpoints`` (CIDRs, host names, ``*.`` suffixes).

Anything else raises :class:`RemediationError` before a connection is made, so
no request leaves; the executor turns it into a ``RemediationFailed`` Event and
the ladder's failure condition, which say why. Credentials are the inventory
entry's own (or the BareMetalHost's), else the policy's ``credentialsSecret``.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

from kubernetes import client

from pitcrew.api.policy import RedfishSpec, SecretReference
from pitcrew.api.vocabulary import BMC_ENDPOINT_ANNOTATION, BMC_SYSTEM_ANNOTATION, NODE_LABEL
from pitcrew.remediators.base import RemediationError, RemediationRequest

METAL3 = ("metal3.io", "v1alpha1", "baremetalhosts")
REDFISH_DRIVERS = frozenset(
    {"redfish", "redfish-virtualmedia", "idrac-redfish", "idrac-virtualmedia", "ilo5-redfish"}
)
"""Metal3's BMC URL schemes that speak Redfish (the ``+http``/``+https`` suffix names
the transport); ``ipmi``, ``idrac``, ``irmc``, ``ilo4``, ``ilo5`` and ``libvirt`` do not."""


@dataclass(frozen=True)
class Bmc:
    endpoint: str
    """``https://host[:port]``, without the Redfish root."""
    system: str
    username: str
    password: str
    source: str
    """Where the address came from, for the Event."""


def endpoint_allowed(endpoint: str, allowed: list[str]) -> bool:
    """Whether ``endpoint``'s host is one of ``allowed``: an address inside one of its
    CIDRs, or a host name equal to an entry or under a ``*.`` entry. Host names are
    compared as written, never resolved: an admin who allowlists a name trusts its DNS."""
    host = urlsplit(endpoint).hostname
    if not host:
        return False
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in allowed:
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue
        elif entry.startswith("*."):
            if host.endswith(entry[1:]) and len(host) > len(entry) - 1:
                return True
        elif host == entry:
            return True
    return False


def resolve(api: client.ApiClient, request: RemediationRequest, *, namespace: str) -> Bmc:
    spec = request.policy.remediation.redfish
    node = request.node
    entry = _inventory_entry(api, spec, node, namespace=namespace)
    if entry is not None:
        endpoint, system = _address(entry, f"inventory entry {node!r}")
        username, password = entry.get("username"), entry.get("password")
        if isinstance(username, str) and isinstance(password, str):
            return Bmc(endpoint, system, username, password, "inventory")
        return Bmc(endpoint, system, *_credentials(api, spec, namespace), "inventory")
    host = _metal3_host(api, spec, node)
    if host is not None:
        return _metal3_bmc(api, host)
    annotations: dict[str, Any] = request.node_object.get("metadata", {}).get("annotations") or {}
    named, named_system = (
        annotations.get(BMC_ENDPOINT_ANNOTATION),
        annotations.get(BMC_SYSTEM_ANNOTATION),
    )
    where = (
        f"the inventory Secret {namespace}/{spec.inventory_secret.name}"
        if spec.inventory_secret
        else "spec.remediation.redfish.inventorySecret"
    )
    if not spec.node_annotations.enabled:
        detail = f" (the Node names {named})" if named else ""
        raise RemediationError(
            f"node {node} has no BMC in {where}{detail}; a Node's own annotations are not "
            "trusted unless spec.remediation.redfish.nodeAnnotations allows them: no "
            "request was sent"
        )
    if not isinstance(named, str) or not isinstance(named_system, str):
        raise RemediationError(
            f"node {node} has no BMC in {where} and no {BMC_ENDPOINT_ANNOTATION} / "
            f"{BMC_SYSTEM_ANNOTATION} annotations"
        )
    endpoint, system = _address({"endpoint": named, "system": named_system}, f"node {node}")
    if not endpoint_allowed(endpoint, spec.node_annotations.allowed_endpoints):
        raise RemediationError(
            f"node {node} names BMC {endpoint}, which is not in "
            "spec.remediation.redfish.nodeAnnotations.allowedEndpoints: no request was sent"
        )
    return Bmc(endpoint, system, *_credentials(api, spec, namespace), "node annotations")


def metal3_address(address: str, what: str) -> tuple[str, str]:
    """The Redfish endpoint and system path in a BareMetalHost's ``spec.bmc.address``
    (``redfish://host[:port]/redfish/v1/Systems/1``, ``idrac-redfish+http://...``)."""
    parts = urlsplit(address)
    driver, _, transport = parts.scheme.partition("+")
    if driver not in REDFISH_DRIVERS:
        raise RemediationError(
            f"{what}: BMC {address!r} is not a Redfish address ({driver or 'ipmi'}); "
            "Pitcrew reboots over Redfish only: no request was sent"
        )
    transport = transport or "https"
    if transport not in ("https", "http") or not parts.hostname:
        raise RemediationError(f"{what}: BMC {address!r} names no host over http(s)")
    return _address({"endpoint": f"{transport}://{parts.netloc}", "system": parts.path}, what)


def _metal3_host(api: client.ApiClient, spec: RedfishSpec, node: str) -> dict[str, Any] | None:
    """The node's BareMetalHost, if Metal3 is a source: named like the node, else the
    one labelled for it."""
    if not spec.metal3.enabled:
        return None
    namespace = spec.metal3.namespace
    custom = client.CustomObjectsApi(api)
    group, version, plural = METAL3
    try:
        return cast(
            dict[str, Any],
            custom.get_namespaced_custom_object(group, version, namespace, plural, node),
        )
    except client.ApiException as error:
        if error.status != 404:
            raise RemediationError(
                f"cannot read BareMetalHost {namespace}/{node}: {error.status} {error.reason}"
            ) from None
    try:
        listed = cast(
            dict[str, Any],
            custom.list_namespaced_custom_object(
                group, version, namespace, plural, label_selector=f"{NODE_LABEL}={node}"
            ),
        )
    except client.ApiException as error:
        missing = " (is Metal3 installed?)" if error.status == 404 else ""
        raise RemediationError(
            f"cannot list BareMetalHosts in {namespace}: {error.status} {error.reason}{missing}"
        ) from None
    hosts: list[dict[str, Any]] = listed.get("items") or []
    if len(hosts) > 1:
        names = ", ".join(h["metadata"]["name"] for h in hosts)
        raise RemediationError(
            f"BareMetalHosts {names} in {namespace} are all labelled {NODE_LABEL}={node}: "
            "no request was sent"
        )
    return hosts[0] if hosts else None


def _metal3_bmc(api: client.ApiClient, host: dict[str, Any]) -> Bmc:
    meta = host.get("metadata") or {}
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    what = f"BareMetalHost {namespace}/{name}"
    bmc = (host.get("spec") or {}).get("bmc") or {}
    endpoint, system = metal3_address(str(bmc.get("address") or ""), what)
    secret = bmc.get("credentialsName")
    if not isinstance(secret, str) or not secret:
        raise RemediationError(f"{what} has no spec.bmc.credentialsName")
    username, password = _user_password(api, SecretReference(name=secret), namespace)
    return Bmc(endpoint, system, username, password, what)


def _address(entry: dict[str, Any], what: str) -> tuple[str, str]:
    endpoint, system = entry.get("endpoint"), entry.get("system")
    if not isinstance(endpoint, str) or urlsplit(endpoint).scheme not in ("https", "http"):
        raise RemediationError(f"{what}: endpoint must be an https:// (or http://) URL")
    if not isinstance(system, str) or not system.startswith("/redfish/v1/Systems/"):
        raise RemediationError(f"{what}: system must be a path like /redfish/v1/Systems/1")
    return endpoint.rstrip("/"), system


def _inventory_entry(
    api: client.ApiClient, spec: RedfishSpec, node: str, *, namespace: str
) -> dict[str, Any] | None:
    ref = spec.inventory_secret
    if ref is None:
        return None
    data = _secret(api, ref, namespace)
    raw = data.get(node)
    if raw is None:
        return None
    try:
        entry = json.loads(base64.b64decode(raw))
    except (binascii.Error, ValueError) as error:
        raise RemediationError(
            f"inventory Secret {namespace}/{ref.name}: key {node!r} is not JSON: {error}"
        ) from None
    if not isinstance(entry, dict):
        raise RemediationError(
            f"inventory Secret {namespace}/{ref.name}: key {node!r} is not a JSON object"
        )
    return entry


def _credentials(api: client.ApiClient, spec: RedfishSpec, namespace: str) -> tuple[str, str]:
    ref = spec.credentials_secret
    if ref is None:
        raise RemediationError(
            "reboot needs spec.remediation.redfish.credentialsSecret (or credentials in "
            "the node's inventory entry)"
        )
    return _user_password(api, ref, namespace)


def _user_password(api: client.ApiClient, ref: SecretReference, namespace: str) -> tuple[str, str]:
    data = _secret(api, ref, namespace)
    try:
        return (
            base64.b64decode(data["username"]).decode(),
            base64.b64decode(data["password"]).decode(),
        )
    except KeyError as missing:
        raise RemediationError(f"Secret {namespace}/{ref.name} has no {missing}") from None


def _secret(api: client.ApiClient, ref: SecretReference, namespace: str) -> dict[str, Any]:
    try:
        secret = client.CoreV1Api(api).read_namespaced_secret(ref.name, namespace)
    except client.ApiException as error:
        raise RemediationError(
            f"cannot read Secret {namespace}/{ref.name}: {error.status} {error.reason}"
        ) from None
    return dict(secret.data or {})

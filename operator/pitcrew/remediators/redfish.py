"""reboot: power-cycle the node through its BMC's Redfish API (``sushy``).

The Node names its BMC with two annotations, written by whoever provisions
the machine: ``pitcrew.dev/bmc-endpoint`` (``https://10.1.2.3``) and
``pitcrew.dev/bmc-system`` (``/redfish/v1/Systems/1``). Credentials come
from the Secret the policy names (``username``, ``password``). The reset type
is ``ForceRestart`` when the system supports it, else ``PowerCycle``, else
``GracefulRestart``: the node is drained, and a hung GPU node rarely honours
a graceful restart. Never ``ForceOff``: a node powered off is not rebooted,
and nothing in Pitcrew would turn it back on; a BMC that offers no restart
is a failed start with a message that says so.
"""

from __future__ import annotations

import base64
from typing import Any

import sushy
from kubernetes import client

from pitcrew.api.vocabulary import BMC_ENDPOINT_ANNOTATION, BMC_SYSTEM_ANNOTATION
from pitcrew.remediators.base import RemediationError, RemediationRequest

PREFERRED_RESETS = ("ForceRestart", "PowerCycle", "GracefulRestart")


def _credentials(
    api: client.ApiClient, request: RemediationRequest, *, namespace: str
) -> tuple[str, str]:
    ref = request.policy.remediation.redfish.credentials_secret
    if ref is None:
        raise RemediationError("reboot needs spec.remediation.redfish.credentialsSecret")
    try:
        secret = client.CoreV1Api(api).read_namespaced_secret(ref.name, namespace)
    except client.ApiException as error:
        raise RemediationError(
            f"cannot read Secret {namespace}/{ref.name}: {error.status} {error.reason}"
        ) from None
    data: dict[str, Any] = secret.data or {}
    try:
        return (
            base64.b64decode(data["username"]).decode(),
            base64.b64decode(data["password"]).decode(),
        )
    except KeyError as missing:
        raise RemediationError(f"Secret {namespace}/{ref.name} has no {missing}") from None


class RedfishReboot:
    def __init__(self, api: client.ApiClient, *, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        """The operator's namespace, where the credentials Secret lives."""

    def start(self, request: RemediationRequest) -> str:
        annotations: dict[str, Any] = (
            request.node_object.get("metadata", {}).get("annotations") or {}
        )
        endpoint = annotations.get(BMC_ENDPOINT_ANNOTATION)
        system_path = annotations.get(BMC_SYSTEM_ANNOTATION)
        if not endpoint or not system_path:
            raise RemediationError(
                f"node {request.node} has no {BMC_ENDPOINT_ANNOTATION} / "
                f"{BMC_SYSTEM_ANNOTATION} annotations naming its BMC"
            )
        username, password = _credentials(self.api, request, namespace=self.namespace)
        verify = request.policy.remediation.redfish.verify_tls
        try:
            connection = sushy.Sushy(
                f"{endpoint.rstrip('/')}/redfish/v1",
                username=username,
                password=password,
                verify=verify,
            )
            system = connection.get_system(system_path)
            allowed = {
                getattr(v, "value", str(v)) for v in system.get_allowed_reset_system_values()
            }
            reset = next((r for r in PREFERRED_RESETS if r in allowed), None)
            if reset is None:
                raise RemediationError(
                    f"Redfish {endpoint}{system_path} offers no restart (allowed: "
                    f"{', '.join(sorted(allowed)) or 'none'}); not powering the node off"
                )
            system.reset_system(sushy.ResetType(reset))
        except sushy.exceptions.SushyError as error:
            raise RemediationError(f"Redfish {endpoint}{system_path}: {error}") from None
        return f"Redfish {reset} of {endpoint}{system_path}"

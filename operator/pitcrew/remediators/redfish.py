"""reboot: power-cycle the node through its BMC's Redfish API (``sushy``).

Where the BMC is, and its credentials, come from a trusted source only
(:mod:`pitcrew.remediators.bmc`: the admin's inventory Secret, or the Node's
annotations where the policy allowlists them). The reset type is
``ForceRestart`` when the system supports it, else ``PowerCycle``, else
``GracefulRestart``: the node is drained, and a hung GPU node rarely honours
a graceful restart. Never ``ForceOff``: a node powered off is not rebooted,
and nothing in Pitcrew would turn it back on; a BMC that offers no restart
is a failed start with a message that says so.
"""

from __future__ import annotations

import sushy
from kubernetes import client

from pitcrew.remediators import bmc
from pitcrew.remediators.base import RemediationError, RemediationRequest

PREFERRED_RESETS = ("ForceRestart", "PowerCycle", "GracefulRestart")


class RedfishReboot:
    def __init__(self, api: client.ApiClient, *, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        """The operator's namespace, where the credentials Secret lives."""

    def start(self, request: RemediationRequest) -> str:
        target = bmc.resolve(self.api, request, namespace=self.namespace)
        endpoint, system_path = target.endpoint, target.system
        verify = request.policy.remediation.redfish.verify_tls
        try:
            connection = sushy.Sushy(
                f"{endpoint.rstrip('/')}/redfish/v1",
                username=target.username,
                password=target.password,
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
        return f"Redfish {reset} of {endpoint}{system_path} (BMC from the {target.source})"

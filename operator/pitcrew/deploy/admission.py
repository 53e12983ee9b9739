"""The admission policy that confines node agents and probe pods to their own GPUNode.

Every agent runs with the same ServiceAccount, and so does every probe pod; RBAC
cannot say "only the object named like my node". A ValidatingAdmissionPolicy
can: the apiserver puts the node a pod-bound token belongs to into the request's
user info (``authentication.kubernetes.io/node-name``), and the policy refuses
any create or update of a GPUNode (or its status) by the agent's or the probe's
ServiceAccount whose name is not that node. Both tokens sit on GPU nodes where a
tenant may have root: a stolen one can then lie only about its own node, never
quarantine the fleet by reporting faults for other nodes. (Pair probes of a
ValidationRun write nothing to the API: their results travel in the pod's
termination message, which the operator reads for the pair that pod belongs to.)

Like :mod:`pitcrew.deploy.rbac`, the objects are data: the devcluster install and
the Helm chart are rendered from :func:`manifests`, and the e2e tests prove
the refusal on a real apiserver.
"""

from __future__ import annotations

from typing import Any

from pitcrew.api.vocabulary import account_name

NODE_NAME_CLAIM = "authentication.kubernetes.io/node-name"


ROLES = {"agent": "agent", "probe": "probe pod"}
"""The ServiceAccounts confined to their own node's GPUNode, and how a refusal names them."""


def policy_name(prefix: str = "pitcrew") -> str:
    return f"{prefix}-own-gpunode-only"


def manifests(namespace: str, *, prefix: str = "pitcrew") -> list[dict[str, Any]]:
    accounts = {
        f"system:serviceaccount:{namespace}:{account_name(component, prefix)}": role
        for component, role in ROLES.items()
    }
    role = (
        " : ".join(
            f"request.userInfo.username == {user!r} ? {role!r}" for user, role in accounts.items()
        )
        + " : ''"
    )
    name = policy_name(prefix)
    claim = f"request.userInfo.extra[{NODE_NAME_CLAIM!r}]"
    labels = {"app.kubernetes.io/part-of": "pitcrew"}
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["pitcrew.dev"],
                            "apiVersions": ["*"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["gpunodes", "gpunodes/status"],
                        }
                    ]
                },
                "matchConditions": [
                    {
                        "name": "is-a-node-account",
                        "expression": f"request.userInfo.username in {sorted(accounts)!r}",
                    }
                ],
                "validations": [
                    {
                        "expression": (
                            f"{NODE_NAME_CLAIM!r} in request.userInfo.extra && "
                            f"{claim}.size() == 1 && {claim}[0] == object.metadata.name"
                        ),
                        "messageExpression": (
                            f"{NODE_NAME_CLAIM!r} in request.userInfo.extra ? "
                            f"'the Pitcrew ' + ({role}) + ' of node ' + {claim}[0] + "
                            "' may write only its own GPUNode, not ' + object.metadata.name : "
                            f"'the Pitcrew ' + ({role}) + ' must use a token bound to its pod "
                            "(no node name in the request)'"
                        ),
                        "reason": "Forbidden",
                    }
                ],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": labels},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        },
    ]

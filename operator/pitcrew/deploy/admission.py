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

A second policy (:func:`training_job_manifests`) confines a training job's
ServiceAccount, which a namespace's Role lets patch pods, to the ``pitcrew.dev/``
annotations of its own pod: the progress and heartbeat its framework hook reports.

Like :mod:`pitcrew.deploy.rbac`, the objects are data: the devcluster install and
the Helm chart are rendered from :func:`manifests` and :func:`training_job_manifests`,
and the e2e tests prove the refusals on a real apiserver.
"""

from __future__ import annotations

from typing import Any

from pitcrew.api.vocabulary import PREFIX as ANNOTATION_PREFIX
from pitcrew.api.vocabulary import account_name

NODE_NAME_CLAIM = "authentication.kubernetes.io/node-name"


ROLES = {"agent": "agent", "probe": "probe pod"}
"""The ServiceAccounts confined to their own node's GPUNode, and how a refusal names them."""


def policy_name(prefix: str = "pitcrew") -> str:
    return f"{prefix}-own-gpunode-only"


def manifests(
    namespace: str, *, prefix: str = "pitcrew", accounts: str | None = None
) -> list[dict[str, Any]]:
    """The agent's and probe's policy, named after ``prefix``, for the ServiceAccounts
    named after ``accounts`` (by default the same)."""
    users = {
        f"system:serviceaccount:{namespace}:{account_name(component, accounts or prefix)}": role
        for component, role in ROLES.items()
    }
    role = (
        " : ".join(
            f"request.userInfo.username == {user!r} ? {role!r}" for user, role in users.items()
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
                        "expression": f"request.userInfo.username in {sorted(users)!r}",
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


POD_NAME_CLAIM = "authentication.kubernetes.io/pod-name"
POD_UID_CLAIM = "authentication.kubernetes.io/pod-uid"


def training_job_role_name(prefix: str = "pitcrew") -> str:
    """The Role (and RoleBinding) that lets a training job's ServiceAccounts patch
    pods, in each namespace opted in (:func:`pitcrew.deploy.rbac.training_job_manifests`);
    the RoleBinding is also the policy's parameter: its subjects are the accounts
    confined."""
    return f"{prefix}-training-job"


def _unchanged(field: str) -> str:
    """CEL: the object's ``metadata.<field>`` as it was, present or absent alike."""
    new, old = f"object.metadata.{field}", f"oldObject.metadata.{field}"
    return f"has({new}) == has({old}) && (!has({new}) || {new} == {old})"


def training_job_manifests(*, prefix: str = "pitcrew") -> list[dict[str, Any]]:
    """The policy that confines a training job's ServiceAccount to its own pod's
    ``pitcrew.dev/`` annotations.

    The Role a namespace opts in with grants ``patch`` on pods, which RBAC cannot
    narrow to one pod or one annotation; this policy does, for the accounts that
    Role's RoleBinding names (the binding is the policy's parameter, looked up in the
    namespace of the request: a namespace without it is not confined, and its
    accounts hold no such Role). A confined account's patch must come with a token
    bound to a pod (the projected token in the pod; the apiserver puts the pod's
    name and UID in the request's user info), must be to that very pod, and may
    change nothing but annotations under ``pitcrew.dev/``: not its spec (an image),
    not its labels (a job's identity), not another pod of the namespace."""
    name = f"{prefix}-training-job-own-pod"
    labels = {"app.kubernetes.io/part-of": "pitcrew"}
    claim, uid = (
        f"request.userInfo.extra[{POD_NAME_CLAIM!r}]",
        f"request.userInfo.extra[{POD_UID_CLAIM!r}]",
    )
    owned = f"{ANNOTATION_PREFIX}/"
    annotations = "metadata.annotations"
    only_ours = (
        f"(!has(object.{annotations}) || object.{annotations}.all(k, k.startsWith({owned!r}) || "
        f"(has(oldObject.{annotations}) && k in oldObject.{annotations} && "
        f"oldObject.{annotations}[k] == object.{annotations}[k]))) && "
        f"(!has(oldObject.{annotations}) || oldObject.{annotations}.all(k, "
        f"k.startsWith({owned!r}) || (has(object.{annotations}) && k in object.{annotations})))"
    )
    unchanged = " && ".join(
        [
            "object.spec == oldObject.spec",
            *(_unchanged(field) for field in ("labels", "finalizers", "ownerReferences")),
        ]
    )
    who = "'the training job account ' + request.userInfo.username"
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "failurePolicy": "Fail",
                "paramKind": {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding"},
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["UPDATE"],
                            "resources": ["pods"],
                        }
                    ]
                },
                "matchConditions": [
                    {
                        "name": "is-a-service-account",
                        "expression": (
                            "request.userInfo.username.startsWith('system:serviceaccount:')"
                        ),
                    }
                ],
                "variables": [
                    {
                        "name": "confined",
                        "expression": (
                            "has(params.subjects) && params.subjects.exists(s, "
                            "s.kind == 'ServiceAccount' && request.userInfo.username == "
                            "'system:serviceaccount:' + (has(s.__namespace__) ? "
                            "s.__namespace__ : request.namespace) + ':' + s.name)"
                        ),
                    }
                ],
                "validations": [
                    {
                        "expression": (
                            f"!variables.confined || ({POD_NAME_CLAIM!r} in request.userInfo.extra "
                            f"&& {claim}.size() == 1 && {claim}[0] == object.metadata.name && "
                            f"(!({POD_UID_CLAIM!r} in request.userInfo.extra) || "
                            f"{uid}[0] == object.metadata.uid))"
                        ),
                        "messageExpression": (
                            f"{POD_NAME_CLAIM!r} in request.userInfo.extra ? {who} + "
                            f"' of pod ' + {claim}[0] + ' may patch only its own pod, not ' + "
                            f"object.metadata.name : {who} + ' must use the token of its pod "
                            "(a projected service account token: no pod in the request)'"
                        ),
                        "reason": "Forbidden",
                    },
                    {
                        "expression": f"!variables.confined || ({unchanged} && {only_ours})",
                        "messageExpression": (
                            f"{who} + ' may change only the {owned}* annotations of its pod, "
                            "not its spec, labels, finalizers, owners or other annotations'"
                        ),
                        "reason": "Forbidden",
                    },
                ],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "policyName": name,
                "paramRef": {
                    "name": training_job_role_name(prefix),
                    "parameterNotFoundAction": "Allow",
                },
                "validationActions": ["Deny"],
            },
        },
    ]

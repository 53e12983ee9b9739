"""Least-privilege RBAC for Pitcrew's service accounts, as data.

One table of rules per component; the Helm chart's RBAC and the devcluster
install are rendered from it (:func:`manifests`), and the end-to-end tests run
the operator with exactly these permissions, so the chart can never ship less
(or more) than the code was tested with. No wildcards. What each rule is for:

operator
    nodes get/list/watch/patch: watch the fleet; cordon, taint, annotate.
    pods get/list/watch: see what runs where (drain, checkpoints);
    pods patch: add the toleration of a spare reserved for a job to that job's
    pending pods (tolerations only), and ``pitcrew.dev/restart-requested`` on a job's
    pods when it takes another of the job's nodes out; pods delete: only for ``onTimeout: force``;
    pods/eviction create: drain.
    pods create and delete: the pre-pull pods that pull a training job's images onto
    a spare (in the job's namespace, as its ServiceAccount: no more than creating a
    Job there, which the operator may already).
    jobs: probe and reset-gpu Jobs. events: record every action.
    pitcrew.dev resources and their status: the API it owns.
    cluster.x-k8s.io machines list/patch: the cluster-api rung (the Machine whose
    ``status.nodeRef`` is the node is found by listing them).
    metal3.io baremetalhosts get/list: BMC addresses (they hold no secrets).
    jobsets, kubeflow.org jobs, volcano jobs get (optional, a ClusterRole of its own,
    :func:`job_size_manifests`): the sizes training jobs' launchers declare.
    leases (own namespace): the election of shards (list: one read of it all; delete:
    the member Leases of replicas long gone). secrets get (own namespace):
    BMC credentials for the Redfish rung; and, only where Metal3 is a BMC
    source, secrets get in the BareMetalHosts' namespace (:func:`metal3_manifests`).
agent
    nodes get: its own Node's annotations (repairs); gpunodes get/create and
    gpunodes/status patch: its report (a ValidatingAdmissionPolicy limits it
    to its own node's GPUNode); gpunodes list/watch: it follows its own
    GPUNode's ``spec.checks`` (a field selector on its name; RBAC cannot narrow
    a list to one name for every node's agent, and GPUNodes hold no secrets);
    events create.
probe
    gpunodes get, gpunodes/status patch: the validation report.
remediation
    nothing: the reset Job only needs the node's devices.
crds (the chart's pre-install and pre-upgrade hook, :func:`crd_upgrade_manifests`)
    customresourcedefinitions get/patch of Pitcrew's own CRDs (by name) and create:
    ``pitcrew install --crds-only``, since Helm never upgrades a chart's CRDs. Created
    for the hook and deleted once it succeeded.
a training job (in each namespace opted in, :func:`training_job_manifests`)
    pods patch: the framework hook's ``pitcrew.dev/progress`` and ``pitcrew.dev/heartbeat``
    annotations on its own pod, and the restart watcher's read of its own pod (an
    empty patch, answered with the pod: :mod:`pitcrew.client.restart`).
    RBAC cannot narrow that to one pod or one annotation; an admission policy does
    (:func:`pitcrew.deploy.admission.training_job_manifests`), and the chart renders
    the two together.
"""

from __future__ import annotations

from typing import Any

from pitcrew.api import crdgen
from pitcrew.api.vocabulary import account_name
from pitcrew.deploy.admission import training_job_role_name

Rule = dict[str, list[str]]


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> Rule:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


READ = ["get", "list", "watch"]

OPERATOR_CLUSTER_RULES: list[Rule] = [
    _rule([""], ["nodes"], [*READ, "patch"]),
    _rule([""], ["pods"], [*READ, "create", "patch", "delete"]),
    _rule([""], ["pods/eviction"], ["create"]),
    _rule(["policy"], ["poddisruptionbudgets"], READ),
    _rule([""], ["events"], ["create", "patch"]),
    _rule(["events.k8s.io"], ["events"], ["create", "patch"]),
    _rule(["batch"], ["jobs"], [*READ, "create", "delete"]),
    _rule(
        ["pitcrew.dev"],
        ["gpunodes", "gpuhealthpolicies", "validationruns"],
        [*READ, "create", "patch", "update"],
    ),
    _rule(
        ["pitcrew.dev"],
        ["gpunodes/status", "gpuhealthpolicies/status", "validationruns/status"],
        ["get", "patch", "update"],
    ),
    # Maintenance requests: Pitcrew's windows, and medik8s's NodeMaintenance where it
    # is installed (read only: Pitcrew honours them, the medik8s operator owns them).
    _rule(["pitcrew.dev"], ["maintenancewindows"], READ),
    _rule(["nodemaintenance.medik8s.io"], ["nodemaintenances"], READ),
    _rule(["cluster.x-k8s.io"], ["machines"], ["list", "patch"]),
    _rule(["metal3.io"], ["baremetalhosts"], ["get", "list"]),
]
OPERATOR_NAMESPACE_RULES: list[Rule] = [
    _rule(["coordination.k8s.io"], ["leases"], ["get", "list", "create", "update", "delete"]),
    _rule([""], ["secrets"], ["get"]),
]
AGENT_CLUSTER_RULES: list[Rule] = [
    _rule([""], ["nodes"], ["get"]),
    _rule(["pitcrew.dev"], ["gpunodes"], [*READ, "create"]),
    _rule(["pitcrew.dev"], ["gpunodes/status"], ["patch"]),
    _rule([""], ["events"], ["create"]),
]
PROBE_CLUSTER_RULES: list[Rule] = [
    _rule(["pitcrew.dev"], ["gpunodes"], ["get"]),
    _rule(["pitcrew.dev"], ["gpunodes/status"], ["patch"]),
]
ACCOUNTS = ("operator", "agent", "probe", "remediation")
CLUSTER_RULES = {
    "operator": OPERATOR_CLUSTER_RULES,
    "agent": AGENT_CLUSTER_RULES,
    "probe": PROBE_CLUSTER_RULES,
}


def manifests(namespace: str, *, prefix: str = "pitcrew") -> list[dict[str, Any]]:
    """ServiceAccounts, ClusterRoles and bindings, and the operator's namespaced Role."""
    return service_accounts(namespace, accounts=prefix) + roles(namespace, prefix=prefix)


def service_accounts(namespace: str, *, accounts: str = "pitcrew") -> list[dict[str, Any]]:
    """The four ServiceAccounts, named ``<accounts>-<component>``."""
    labels = {"app.kubernetes.io/part-of": "pitcrew"}
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {
                "name": account_name(component, accounts),
                "namespace": namespace,
                "labels": labels,
            },
        }
        for component in ACCOUNTS
    ]


def roles(
    namespace: str, *, prefix: str = "pitcrew", accounts: str | None = None
) -> list[dict[str, Any]]:
    """ClusterRoles and bindings, and the operator's namespaced Role: named after
    ``prefix``, bound to the ServiceAccounts named after ``accounts`` (by default the
    same; the chart's ``serviceAccount.name`` may name other accounts)."""
    objects: list[dict[str, Any]] = []
    for component, rules in CLUSTER_RULES.items():
        objects += _cluster_role(
            account_name(component, prefix),
            rules,
            account=account_name(component, accounts or prefix),
            namespace=namespace,
        )
    return objects + _operator_role(
        namespace, namespace, OPERATOR_NAMESPACE_RULES, prefix, accounts=accounts
    )


def crd_names() -> list[str]:
    """Pitcrew's CustomResourceDefinitions, by name."""
    return [str(crdgen.crd(model)["metadata"]["name"]) for model in crdgen.RESOURCES]


def crd_upgrade_manifests(namespace: str, *, prefix: str = "pitcrew") -> list[dict[str, Any]]:
    """The account ``pitcrew install --crds-only`` runs as in the chart's CRD hook: it
    may read and apply Pitcrew's CRDs (by name) and create new ones (RBAC cannot name
    an object not yet created), nothing else."""
    account = account_name("crds", prefix)
    rules = [
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "resourceNames": crd_names(),
            "verbs": ["get", "patch"],
        },
        _rule(["apiextensions.k8s.io"], ["customresourcedefinitions"], ["create"]),
    ]
    labels = {"app.kubernetes.io/part-of": "pitcrew"}
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": account, "namespace": namespace, "labels": labels},
        },
        *_cluster_role(account, rules, account=account, namespace=namespace),
    ]


TRAINING_JOB_RULES: list[Rule] = [_rule([""], ["pods"], ["patch"])]


def training_job_manifests(
    namespace: str, accounts: list[str], *, prefix: str = "pitcrew"
) -> list[dict[str, Any]]:
    """In one namespace of training jobs: a Role to patch pods, bound to ``accounts``
    (the jobs' ServiceAccounts). The RoleBinding is also the parameter of the admission
    policy that confines those accounts to their own pod's ``pitcrew.dev/``
    annotations (:func:`pitcrew.deploy.admission.training_job_manifests`): never apply
    one without the other."""
    name = training_job_role_name(prefix)
    labels = {"app.kubernetes.io/part-of": "pitcrew"}
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "rules": TRAINING_JOB_RULES,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [
                {"kind": "ServiceAccount", "name": account, "namespace": namespace}
                for account in accounts
            ],
        },
    ]


JOB_SIZE_RULES: list[Rule] = [
    _rule(["jobset.x-k8s.io"], ["jobsets"], ["get"]),
    _rule(
        ["kubeflow.org"],
        ["pytorchjobs", "mpijobs", "tfjobs", "jaxjobs", "xgboostjobs", "paddlejobs", "mxjobs"],
        ["get"],
    ),
    _rule(["batch.volcano.sh"], ["jobs"], ["get"]),
]


def job_size_manifests(
    namespace: str, *, prefix: str = "pitcrew", accounts: str | None = None
) -> list[dict[str, Any]]:
    """A ClusterRole to read training jobs' launcher objects (get only: their specs
    hold no secrets), for the sizes they declare (:mod:`pitcrew.core.job_size`).
    Optional: without it a job is sized by its pods (``rbac.readJobSizes``)."""
    return _cluster_role(
        f"{account_name('operator', prefix)}-job-sizes",
        JOB_SIZE_RULES,
        account=account_name("operator", accounts or prefix),
        namespace=namespace,
    )


def _cluster_role(
    name: str, rules: list[Rule], *, account: str, namespace: str
) -> list[dict[str, Any]]:
    """A ClusterRole with ``rules``, bound to ``account``."""
    labels = {"app.kubernetes.io/part-of": "pitcrew"}
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": labels},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    ]


def metal3_manifests(
    hosts_namespace: str, namespace: str, *, prefix: str = "pitcrew", accounts: str | None = None
) -> list[dict[str, Any]]:
    """The operator's Role in the BareMetalHosts' namespace: read the BMC credential
    Secrets their ``spec.bmc.credentialsName`` names (Metal3 keeps them beside the
    hosts). Rendered only where the cluster admin names that namespace."""
    rules = [_rule([""], ["secrets"], ["get"])]
    return _operator_role(
        hosts_namespace, namespace, rules, prefix, suffix="-metal3", accounts=accounts
    )


def _operator_role(
    where: str,
    namespace: str,
    rules: list[Rule],
    prefix: str,
    *,
    suffix: str = "",
    accounts: str | None = None,
) -> list[dict[str, Any]]:
    """A Role with ``rules`` in ``where``, bound to the operator's ServiceAccount; a
    ``suffix`` keeps it apart from the operator's own Role should ``where`` be the
    operator's namespace."""
    account = account_name("operator", accounts or prefix)
    name = f"{account_name('operator', prefix)}{suffix}"
    labels = {"app.kubernetes.io/part-of": "pitcrew"}
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": name, "namespace": where, "labels": labels},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": where, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    ]

"""Training jobs without admin: a job's ServiceAccount may patch only its own pod's
``pitcrew.dev/`` annotations.

The namespace is opted in as the chart does it (``trainingJobs.namespaces``, or
``pitcrew install --training-namespace``): a Role that may patch pods, bound to the
jobs' accounts, and the admission policy that takes that RoleBinding as its parameter.
Tokens are bound to a pod, as the projected token in a training pod is; these tests
play a training process that was given more ideas than its hook has.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from pitcrew.api.vocabulary import PROGRESS_ANNOTATION
from pitcrew.deploy import install
from pitcrew.dev.devcluster import install as install_dev
from pitcrew.dev.devcluster.nodes import node_name
from pitcrew.kube.client import api_client
from support.fleet import eventually

PROGRESS = '{"step": 10, "time": "2026-12-02T10:00:00Z"}'


def pod(core: client.CoreV1Api, namespace: str, name: str, account: str = "default") -> Any:
    """A training pod on a node, running as ``account``."""
    body = {
        "metadata": {"name": name, "labels": {"app": "trainer"}},
        "spec": {
            "nodeName": node_name(0),
            "serviceAccountName": account,
            "containers": [{"name": "train", "image": "trainer:1"}],
        },
    }
    # A new namespace's default account appears a moment after it.
    return eventually(
        lambda: _created(core, namespace, body), what=f"pod {name} created in {namespace}"
    )


def _created(core: client.CoreV1Api, namespace: str, body: dict[str, Any]) -> Any:
    try:
        return core.create_namespaced_pod(namespace, body)
    except client.ApiException as error:
        if "serviceaccount" in str(error.body):
            return None
        raise


def as_pod(
    api: client.ApiClient, path: Path, namespace: str, owner: Any | None, account: str = "default"
) -> client.CoreV1Api:
    """The pod API as the process in ``owner`` sees it (None: a token bound to no pod)."""
    bound = (
        {"metadata": {"name": owner.metadata.name, "uid": owner.metadata.uid}} if owner else None
    )
    kubeconfig = install_dev.service_account_kubeconfig(
        api, component="trainer", namespace=namespace, path=path, account=account,
        bound_pod=bound,
    )  # fmt: skip
    return client.CoreV1Api(api_client(str(kubeconfig)))


def refusal(patch: Any) -> client.ApiException:
    """The apiserver's answer to ``patch()``, once the policy's parameter (the namespace's
    RoleBinding, read from a watch) has reached it."""

    def refused() -> client.ApiException | None:
        try:
            patch()
        except client.ApiException as error:
            return error
        return None

    found: client.ApiException = eventually(refused, timeout=30, what="the policy to refuse")
    return found


@pytest.fixture
def training(
    api_client: client.ApiClient, core: client.CoreV1Api, namespace: str, tmp_path: Path
) -> str:
    """``namespace``, opted in for training jobs (its default account), once the
    apiserver enforces the policy there (it reads the RoleBinding from a watch)."""
    install_dev.install(api_client)  # the policy, with everything else of `pitcrew install`
    install.install_training_jobs(api_client, namespace)
    scout = pod(core, namespace, "scout")
    scouting = as_pod(api_client, tmp_path / "scout.kubeconfig", namespace, scout)
    tries = iter(range(1_000_000))
    refusal(
        lambda: scouting.patch_namespaced_pod(
            "scout", namespace, {"metadata": {"labels": {"try": str(next(tries))}}}
        )
    )
    core.delete_namespaced_pod("scout", namespace, grace_period_seconds=0)
    return namespace


def test_a_job_reports_on_its_own_pod_and_on_no_other(
    api_client: client.ApiClient, core: client.CoreV1Api, training: str, tmp_path: Path
) -> None:
    rank0, rank1 = pod(core, training, "llm-0"), pod(core, training, "llm-1")
    mine = as_pod(api_client, tmp_path / "rank0.kubeconfig", training, rank0)
    annotate = {"metadata": {"annotations": {PROGRESS_ANNOTATION: PROGRESS}}}
    mine.patch_namespaced_pod("llm-0", training, annotate)
    assert core.read_namespaced_pod("llm-0", training).metadata.annotations == {
        PROGRESS_ANNOTATION: PROGRESS
    }
    refused = refusal(lambda: mine.patch_namespaced_pod("llm-1", training, annotate))
    assert refused.status == 403
    assert (
        f"the training job account system:serviceaccount:{training}:default of pod llm-0 "
        "may patch only its own pod, not llm-1" in str(refused.body)
    )
    assert not core.read_namespaced_pod("llm-1", training).metadata.annotations
    del rank1


@pytest.mark.parametrize(
    "patch",
    [
        {"metadata": {"labels": {"app": "web"}}},  # a label: another job's identity
        {"metadata": {"annotations": {"example.com/owner": "me"}}},
        {"metadata": {"annotations": {"sim.pitcrew.dev/faults": "[]"}}},  # not pitcrew.dev/
        {"metadata": {"finalizers": ["example.com/keep"]}},
        {"spec": {"containers": [{"name": "train", "image": "miner:1"}]}},
        {"spec": {"activeDeadlineSeconds": 60}},
    ],
)
def test_a_job_may_change_nothing_of_its_pod_but_pitcrew_annotations(
    api_client: client.ApiClient,
    core: client.CoreV1Api,
    training: str,
    tmp_path: Path,
    patch: dict[str, Any],
) -> None:
    rank0 = pod(core, training, "llm-0")
    mine = as_pod(api_client, tmp_path / "rank0.kubeconfig", training, rank0)
    refused = refusal(lambda: mine.patch_namespaced_pod("llm-0", training, patch))
    assert refused.status == 403
    assert "may change only the pitcrew.dev/* annotations of its pod" in str(refused.body)


def test_a_token_bound_to_no_pod_is_refused(
    api_client: client.ApiClient, core: client.CoreV1Api, training: str, tmp_path: Path
) -> None:
    pod(core, training, "llm-0")
    unbound = as_pod(api_client, tmp_path / "unbound.kubeconfig", training, None)
    annotate = {"metadata": {"annotations": {PROGRESS_ANNOTATION: PROGRESS}}}
    refused = refusal(lambda: unbound.patch_namespaced_pod("llm-0", training, annotate))
    assert refused.status == 403
    assert "must use the token of its pod" in str(refused.body)


def test_other_accounts_of_the_namespace_are_left_alone(
    api_client: client.ApiClient, core: client.CoreV1Api, training: str, tmp_path: Path
) -> None:
    """An account the training RoleBinding does not name (a workflow controller with
    its own Role to patch pods) is not confined by Pitcrew's policy."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    core.create_namespaced_service_account(training, {"metadata": {"name": "workflow"}})
    rbac.create_namespaced_role(
        training,
        {
            "metadata": {"name": "workflow"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        training,
        {
            "metadata": {"name": "workflow"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "workflow",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "workflow", "namespace": training}],
        },
    )
    runner = pod(core, training, f"step-{uuid.uuid4().hex[:4]}", account="workflow")
    pod(core, training, "llm-0")
    workflow = as_pod(api_client, tmp_path / "wf.kubeconfig", training, runner, "workflow")
    workflow.patch_namespaced_pod("llm-0", training, {"metadata": {"labels": {"step": "done"}}})
    assert core.read_namespaced_pod("llm-0", training).metadata.labels["step"] == "done"

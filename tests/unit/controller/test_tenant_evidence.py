"""Evidence a tenant can make is no evidence: a pod anyone may create, labelled like one
of Pitcrew's Jobs' pods and bound to the node with ``spec.nodeName``, neither confirms
a reset, nor fails a probe, nor is spared by a drain."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from pitcrew.core.convert import own_job, pod_view
from support.lifecycle_data import T0
from support.shell_fakes import Shell, healthy_status, policy_object, version

POLICY = policy_object(
    remediation={"ladders": {"fatal": [{"action": "reset-gpu", "timeout": "10m"}]}}
)
OPERATOR_NAMESPACE = "pitcrew-system"


def job_pod(
    job: str, *, namespace: str = OPERATOR_NAMESPACE, owner: str | None = None
) -> dict[str, Any]:
    """A pod labelled as Job ``job``'s; controlled by Job ``owner`` (None: by nothing)."""
    meta: dict[str, Any] = {
        "name": f"{job}-x7k2p",
        "namespace": namespace,
        "resourceVersion": version(),
        "labels": {"batch.kubernetes.io/job-name": job, "pitcrew.dev/probe": "true"},
    }
    if owner is not None:
        meta["ownerReferences"] = [{"kind": "Job", "name": owner, "uid": "u", "controller": True}]
    return {"metadata": meta, "spec": {"nodeName": "n0"}, "status": {"phase": "Succeeded"}}


@pytest.mark.parametrize(
    ("pod", "own"),
    [
        (job_pod("pitcrew-fix-1", owner="pitcrew-fix-1"), "pitcrew-fix-1"),
        (job_pod("pitcrew-fix-1", namespace="team-a", owner="pitcrew-fix-1"), ""),
        (job_pod("pitcrew-fix-1"), ""),
        (job_pod("pitcrew-fix-1", owner="some-other-job"), ""),
    ],
)
def test_a_pod_is_pitcrews_only_in_its_namespace_under_its_job(
    pod: dict[str, Any], own: str
) -> None:
    assert own_job(pod, namespace=OPERATOR_NAMESPACE) == own
    view = pod_view(pod, namespace=OPERATOR_NAMESPACE)
    assert (view.job_name, view.probe) == (own, bool(own))


def test_a_labelled_tenant_pod_is_workload_a_drain_moves() -> None:
    tenant = job_pod("pitcrew-fix-1", namespace="team-a", owner="pitcrew-fix-1")
    tenant["status"]["phase"] = "Running"
    assert pod_view(tenant, namespace=OPERATOR_NAMESPACE).evictable


def test_a_tenant_pod_named_for_the_reset_job_does_not_confirm_the_repair() -> None:
    shell = Shell(nodes={"n0": healthy_status()}, policy=POLICY, now=T0)
    shell.settle()
    shell.fail("n0")
    for _ in range(8):
        shell.now += datetime.timedelta(seconds=1)
        shell.release("n0")  # the agent closed NVML: the reset Job is created
        shell.round()
        if shell.remediator.requests:
            break
    (request,) = shell.remediator.requests
    # What anyone who may create a pod can do: the reset Job's name on a pod of theirs,
    # bound to the node, exiting 0.
    shell.store.put("pod", job_pod(request.key, namespace="team-a", owner=request.key))
    shell.store.put("pod", job_pod(request.key, owner=None))
    shell.now += datetime.timedelta(seconds=1)
    shell.round()
    assert shell.cluster.writes("annotate_node") == []
    remediation = shell.store.status("n0").remediation
    assert remediation is not None
    assert not remediation.confirmed

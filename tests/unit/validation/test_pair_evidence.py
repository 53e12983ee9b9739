"""A pair verdict comes only from the pod of the Job Pitcrew created for the pair: in
the operator's namespace, on the pair's first node, controlled by that Job's UID. Any
other pod carrying the pair's labels and a termination message is ignored."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from pitcrew.api.settings import OperatorSettings
from pitcrew.api.validationrun import NodeResultStatus, PairResult, ValidationRunStatus
from pitcrew.api.vocabulary import PAIR_LABEL, RANK_LABEL, RUN_LABEL
from pitcrew.controller import runs
from pitcrew.controller.runs import Runs
from pitcrew.controller.store import Store
from pitcrew.kube import jobs
from support.shell_fakes import FakeEvents, node_object, version

RUN, NAMESPACE = "burn-in", "pitcrew-system"
PAIR = PairResult(name="n0--n1", nodes=["n0", "n1"], result=NodeResultStatus.RUNNING)
IDENT = jobs.pair_ident(RUN, PAIR.name, PAIR.attempt)
JOB, JOB_UID = f"pitcrew-pair-{IDENT}-0", "6b1f0c9e-real"
GOOD, FORGED_FAIL, FORGED_PASS = '{"busbwGbps": 48.0}', '{"busbwGbps": 0.5}', '{"busbwGbps": 99}'


def pair_pod(
    name: str,
    message: str,
    *,
    namespace: str = NAMESPACE,
    node: str = "n0",
    owner: str = JOB,
    owner_uid: str = JOB_UID,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": version(),
            "labels": {RUN_LABEL: RUN, PAIR_LABEL: IDENT, RANK_LABEL: "0"},
            "ownerReferences": [
                {"kind": "Job", "name": owner, "uid": owner_uid, "controller": True}
            ],
        },
        "spec": {"nodeName": node},
        "status": {
            "phase": "Succeeded",
            "containerStatuses": [{"name": "pair", "state": {"terminated": {"message": message}}}],
        },
    }


def job(path: str) -> dict[str, Any]:
    name = path.rsplit("/", 1)[-1]
    if name != JOB:
        raise client.ApiException(status=404, reason="Not Found")
    labels = {RUN_LABEL: RUN, PAIR_LABEL: IDENT, RANK_LABEL: "0"}
    return {"metadata": {"name": JOB, "uid": JOB_UID, "labels": labels}}


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch) -> Runs:
    monkeypatch.setattr(runs, "request", lambda api, method, path: job(path))
    store = Store()
    for name in ("n0", "n1"):
        node = node_object(name)
        node["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3"
        store.put("node", node)
    return Runs(None, store, OperatorSettings(namespace=NAMESPACE), FakeEvents())  # type: ignore[arg-type]


def collected(shell: Runs, *pods: dict[str, Any]) -> PairResult:
    for pod in pods:
        shell.store.put("pod", pod)
    status = shell._collect_pairs(RUN, ValidationRunStatus(pairs=[PAIR]))
    (pair,) = status.pairs
    return pair


@pytest.mark.parametrize(
    "forged",
    [
        pair_pod("tenant-rank0", FORGED_FAIL, namespace="team-a"),
        pair_pod("stray-rank0", FORGED_FAIL, owner="pitcrew-pair-other-0"),
        pair_pod("lookalike-rank0", FORGED_FAIL, owner_uid="6b1f0c9e-earlier"),
        pair_pod("elsewhere-rank0", FORGED_FAIL, node="n7"),
    ],
)
def test_a_pod_that_is_not_the_pairs_jobs_gives_no_verdict(
    shell: Runs, forged: dict[str, Any]
) -> None:
    assert collected(shell, forged).result is NodeResultStatus.RUNNING
    real = pair_pod(f"{JOB}-abcde", GOOD)
    verdict = collected(shell, real)
    assert verdict.busbw_gbps == 48.0


def test_a_forged_pass_next_to_a_real_failure_is_ignored(shell: Runs) -> None:
    verdict = collected(
        shell,
        pair_pod(f"{JOB}-abcde", FORGED_FAIL),
        pair_pod("tenant-rank0", FORGED_PASS, namespace="team-a"),
    )
    assert (verdict.result, verdict.busbw_gbps) == (NodeResultStatus.FAIL, 0.5)

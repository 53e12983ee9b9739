"""ValidationRun: rolling validation of nodes in service, NCCL pairs, blame."""

from __future__ import annotations

import time

from kubernetes import client

from pitcrew.kube import jobs
from support.fixtures import HealthyFleet
from support.fleet import NAMESPACE, PROBE_PRIORITY, Fleet, eventually, probe_priority

GROUP, VERSION = "pitcrew.dev", "v1alpha1"


def create_run(fleet: Fleet, name: str, **spec: object) -> None:
    fleet.custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "validationruns",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ValidationRun",
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"matchLabels": {"e2e.pitcrew.dev/group": fleet.group}},
                **spec,
            },
        },
    )


def run_status(fleet: Fleet, name: str) -> dict[str, object]:
    found = fleet.custom.get_cluster_custom_object(GROUP, VERSION, "validationruns", name)
    return dict(found.get("status") or {})


def test_run_validates_rolling_then_pairs_the_nodes_that_passed(
    healthy_fleet: HealthyFleet,
) -> None:
    fleet = healthy_fleet(size=4)
    bad = fleet.nodes[1]
    fleet.inject(bad, [{"type": "ib-port-down", "port": "mlx5_0/1"}])
    run = f"{fleet.group}-run"
    create_run(
        fleet,
        run,
        maxConcurrentNodes=2,
        topologyKey="kubernetes.io/hostname",
        pairingScope="across",  # one node per host: pairs across hosts
    )
    try:
        status = eventually(
            lambda: (s := run_status(fleet, run)).get("phase") in ("Succeeded", "Failed") and s,
            timeout=120,
            what="the run to finish",
        )
        assert status["phase"] == "Failed"
        assert status["failedNodes"] == [bad]
        results = {n["node"]: n for n in status["nodes"]}  # type: ignore[attr-defined]
        assert results[bad]["result"] == "fail"
        assert results[bad]["message"]
        assert all(results[n]["result"] == "pass" for n in fleet.nodes if n != bad)
        pairs = status["pairs"]
        assert pairs
        assert all(
            p["result"] == "pass" and bad not in p["nodes"]  # type: ignore[index]
            for p in pairs
        )  # type: ignore[attr-defined]
        assert status["busbw"]["minGbps"] > 0  # type: ignore[index]
        assert "Remediating" in fleet.history(bad)
        for node in fleet.nodes:
            if node != bad:
                fleet.wait_phase(node, "Healthy", timeout=60)
                # Level-triggered: a Healthy node sheds Pitcrew's cordon, at the
                # latest on the decision after the one that made it Healthy.
                eventually(
                    lambda node=node: not fleet.node(node).spec.unschedulable,
                    timeout=15,
                    what=f"{node} schedulable again",
                )
                annotations = fleet.node(node).metadata.annotations or {}
                assert "pitcrew.dev/validation-run" not in annotations
    finally:
        fleet.custom.delete_cluster_custom_object(GROUP, VERSION, "validationruns", run)


def test_deleting_a_run_releases_the_nodes_it_held(
    healthy_fleet: HealthyFleet, workload_namespace: str
) -> None:
    fleet = healthy_fleet(size=2)
    node = fleet.nodes[0]
    fleet.pod(workload_namespace, "busy-0", node)  # the run waits for it to be idle
    run = f"{fleet.group}-gone"
    create_run(fleet, run, maxConcurrentNodes=1)
    eventually(
        lambda: (
            (fleet.node(node).metadata.annotations or {}).get("pitcrew.dev/validation-run") == run
        ),
        what="the run holding the node",
    )
    eventually(lambda: fleet.node(node).spec.unschedulable, what="the held node cordoned")
    fleet.custom.delete_cluster_custom_object(GROUP, VERSION, "validationruns", run)
    eventually(
        lambda: "pitcrew.dev/validation-run" not in (fleet.node(node).metadata.annotations or {}),
        timeout=30,
        what="the deleted run's hold released",
    )
    eventually(
        lambda: not fleet.node(node).spec.unschedulable,
        timeout=30,
        what="the node back in service",
    )


def test_a_runs_suite_reaches_the_probe_and_pairs_run_at_probe_priority(
    fleet_factory: type[Fleet],
) -> None:
    fleet = fleet_factory(size=2)
    probe_priority(fleet.api)
    fleet.policy(validation={"burnInOnJoin": False, "priorityClassName": PROBE_PRIORITY})
    for node in fleet.nodes:
        fleet.wait_phase(node, "Healthy")
    run = f"{fleet.group}-quick"
    create_run(fleet, run, suite="quick", maxConcurrentNodes=2, pairingScope="across",
               topologyKey="kubernetes.io/hostname")  # fmt: skip
    batch = client.BatchV1Api(fleet.api)
    try:
        status = eventually(
            lambda: (s := run_status(fleet, run)).get("phase") in ("Succeeded", "Failed") and s,
            timeout=120,
            what="the run to finish",
        )
        assert status["phase"] == "Succeeded", status
        probes = batch.list_namespaced_job(
            NAMESPACE, label_selector=f"pitcrew.dev/node={fleet.nodes[0]},pitcrew.dev/suite"
        ).items
        assert {j.metadata.labels["pitcrew.dev/suite"] for j in probes} == {"quick"}
        pairs = batch.list_namespaced_job(
            NAMESPACE, label_selector=f"pitcrew.dev/run={run},pitcrew.dev/rank"
        ).items
        assert pairs
        for job in pairs:
            spec = job.spec.template.spec
            assert spec.priority_class_name == PROBE_PRIORITY
            assert spec.service_account_name.endswith("-probe")
        (pair,) = status["pairs"]  # type: ignore[misc]
        assert pair["result"] == "pass"
        assert ">= floor 46" in pair["message"]  # judged by the operator on H100's floor
    finally:
        fleet.custom.delete_cluster_custom_object(GROUP, VERSION, "validationruns", run)


def test_a_node_its_pairs_blame_is_taken_out_never_released_to_service_first(
    healthy_fleet: HealthyFleet,
) -> None:
    fleet = healthy_fleet(size=4)
    bad = fleet.nodes[2]
    # Its GEMM and HBM pass (the quick suite), its inter-node all-reduce does not.
    fleet.inject(bad, [{"type": "slow-nccl", "factor": 3}])
    run = f"{fleet.group}-blame"
    create_run(fleet, run, suite="quick", maxConcurrentNodes=4, pairingScope="across",
               topologyKey="kubernetes.io/hostname")  # fmt: skip
    try:
        status = eventually(
            lambda: (s := run_status(fleet, run)).get("phase") in ("Succeeded", "Failed") and s,
            timeout=120,
            what="the run to finish",
        )
        assert status["phase"] == "Failed"
        assert status["failedNodes"] == [bad]
        eventually(
            lambda: fleet.phase(bad) not in ("Validating", "Healthy"),
            timeout=30,
            what="the blamed node taken out",
        )
        history = fleet.history(bad)
        after = history[history.index("Validating") + 1]
        assert after != "Healthy", history  # blamed before it was released
    finally:
        fleet.custom.delete_cluster_custom_object(GROUP, VERSION, "validationruns", run)


HOLD_PAIRS = "e2e-hold-pair-pods"


def hold_pair_pods(api: client.ApiClient) -> None:
    """Keep the Job controller from creating pair pods in the operator's namespace (an
    admission policy refuses them), so the pair test stays open for as long as the test
    needs: what a tenant's pod does meanwhile is the only thing that could decide it."""
    admission = client.AdmissionregistrationV1Api(api)
    admission.create_validating_admission_policy(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": HOLD_PAIRS},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ],
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}
                    },
                },
                "validations": [
                    {
                        "expression": "!has(object.metadata.labels) || "
                        "!('pitcrew.dev/rank' in object.metadata.labels)",
                        "message": "e2e: pair pods are held back",
                    }
                ],
            },
        }
    )
    admission.create_validating_admission_policy_binding(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": HOLD_PAIRS},
            "spec": {"policyName": HOLD_PAIRS, "validationActions": ["Deny"]},
        }
    )
    core = client.CoreV1Api(api)
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "hold-check-", "labels": {"pitcrew.dev/rank": "0"}},
        "spec": {"containers": [{"name": "c", "image": "none"}]},
    }

    def refused() -> bool:
        try:
            core.create_namespaced_pod(NAMESPACE, probe, dry_run="All")
        except client.ApiException as error:
            return error.status in (400, 403, 422)
        return False

    eventually(refused, timeout=30, what="pair pods refused")


def release_pair_pods(api: client.ApiClient) -> None:
    admission = client.AdmissionregistrationV1Api(api)
    for delete in (
        admission.delete_validating_admission_policy_binding,
        admission.delete_validating_admission_policy,
    ):
        try:
            delete(HOLD_PAIRS)
        except client.ApiException as error:
            if error.status != 404:
                raise


def test_a_tenant_pod_with_a_pairs_labels_and_message_decides_nothing(
    healthy_fleet: HealthyFleet, api_client: client.ApiClient
) -> None:
    # Any pod, in any namespace, can carry a pair test's labels and leave a termination
    # message: here one that would fail the pair (and so blame both nodes).
    fleet = healthy_fleet(size=2)
    run = f"{fleet.group}-forged"
    core = client.CoreV1Api(api_client)
    hold_pair_pods(api_client)
    forged = ""
    try:
        create_run(fleet, run, suite="quick", maxConcurrentNodes=2, pairingScope="across",
                   topologyKey="kubernetes.io/hostname")  # fmt: skip
        pairs = eventually(
            lambda: run_status(fleet, run).get("pairs"), timeout=120, what="the pair test"
        )
        (pair,) = pairs  # type: ignore[misc]
        ident = jobs.pair_ident(run, pair["name"], pair["attempt"])
        tenant = core.create_namespaced_pod(
            "default",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "generateName": "not-a-pair-",
                    "labels": {
                        "pitcrew.dev/run": run[:63],
                        "pitcrew.dev/pair": ident,
                        "pitcrew.dev/rank": "0",
                    },
                },
                "spec": {
                    "nodeSelector": {"e2e.pitcrew.dev/nowhere": "true"},
                    "containers": [{"name": "pair", "image": "tenant/forger"}],
                },
            },
        )
        forged = tenant.metadata.name
        # What the kubelet writes when the tenant's container exits, leaving its message.
        core.patch_namespaced_pod_status(
            forged,
            "default",
            {
                "status": {
                    "phase": "Succeeded",
                    "containerStatuses": [
                        {
                            "name": "pair",
                            "image": "tenant/forger",
                            "imageID": "",
                            "ready": False,
                            "restartCount": 0,
                            "state": {
                                "terminated": {"exitCode": 0, "message": '{"busbwGbps": 0.5}'}
                            },
                        }
                    ],
                }
            },
        )
        time.sleep(15)  # many rounds of the run: each would have read the forged message
        status = run_status(fleet, run)
        (pair,) = status["pairs"]  # type: ignore[misc]
        assert pair["result"] in ("pending", "running"), pair
        assert "busbwGbps" not in pair
        for node in fleet.nodes:
            assert "Quarantined" not in fleet.history(node)
    finally:
        release_pair_pods(api_client)
        if forged:
            core.delete_namespaced_pod(forged, "default", grace_period_seconds=0)
        fleet.custom.delete_cluster_custom_object(GROUP, VERSION, "validationruns", run)

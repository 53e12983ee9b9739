"""ValidationRun: rolling validation of nodes in service, NCCL pairs, blame."""

from __future__ import annotations

from fleet import Fleet, eventually

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


def test_run_validates_rolling_then_pairs_the_nodes_that_passed(fleet_factory: type[Fleet]) -> None:
    fleet = fleet_factory(size=4)
    fleet.policy()
    for node in fleet.nodes:
        fleet.wait_phase(node, "Healthy")
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

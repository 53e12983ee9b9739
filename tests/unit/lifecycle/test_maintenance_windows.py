"""Which window covers a node: MaintenanceWindows by name or label, medik8s
NodeMaintenances by node, the earliest that has not ended."""

from __future__ import annotations

import datetime

import pytest

from pitcrew.core.maintenance import covering, node_maintenance, window

T0 = datetime.datetime(2026, 12, 5, 12, 0, tzinfo=datetime.UTC)
RACK = "node-restriction.kubernetes.io/rack"
"""A label only an admin may set: NodeRestriction keeps the kubelet off it."""


def mw(name: str, start: str, end: str, **spec: object) -> dict[str, object]:
    return {
        "apiVersion": "pitcrew.dev/v1alpha1",
        "kind": "MaintenanceWindow",
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": {"start": start, "end": end, "reason": f"{name} work", **spec},
    }


def test_windows_by_name_and_by_label_the_earliest_unended_wins() -> None:
    windows = [
        window(
            mw(
                "racks",
                "2026-12-05T14:00:00Z",
                "2026-12-05T16:00:00Z",
                nodeSelector={"matchLabels": {RACK: "r7"}},
            )
        ),
        window(mw("one", "2026-12-05T13:00:00Z", "2026-12-05T15:00:00Z", nodes=["n1"])),
        window(mw("past", "2026-12-05T08:00:00Z", "2026-12-05T09:00:00Z", nodes=["n1"])),
    ]
    found = covering("n1", {RACK: "r7"}, windows, T0)
    assert found is not None
    assert found.name == "MaintenanceWindow/one"
    racks = covering("n2", {RACK: "r7"}, windows, T0)
    assert racks is not None
    assert racks.name == "MaintenanceWindow/racks"
    assert covering("n3", {RACK: "r8"}, windows, T0) is None


def test_a_node_maintenance_covers_its_node_until_it_is_deleted() -> None:
    medik8s = node_maintenance(
        {
            "metadata": {"name": "nm-1", "creationTimestamp": "2026-12-05T10:00:00Z"},
            "spec": {"nodeName": "n4", "reason": "replace PSU"},
        }
    )
    found = covering("n4", {}, [medik8s], T0 + datetime.timedelta(days=30))
    assert found is not None
    assert (found.name, found.end, found.reason) == ("NodeMaintenance/nm-1", None, "replace PSU")


@pytest.mark.parametrize(
    "spec",
    [
        {"start": "2026-12-05T14:00:00Z", "end": "2026-12-05T13:00:00Z", "nodes": ["n1"]},
        {"start": "2026-12-05T14:00:00Z", "end": "2026-12-05T15:00:00Z"},
        {"start": "soon", "end": "2026-12-05T15:00:00Z", "nodes": ["n1"]},
    ],
)
def test_a_window_that_does_not_parse_says_why(spec: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="MaintenanceWindow broken"):
        window({"metadata": {"name": "broken"}, "spec": spec})


def test_a_node_maintenance_without_a_node_says_why() -> None:
    with pytest.raises(ValueError, match=r"no spec\.nodeName"):
        node_maintenance({"metadata": {"name": "nm-2"}, "spec": {}})


@pytest.mark.parametrize(
    "key",
    [
        "rack",
        "nvidia.com/gpu.product",
        "pitcrew.dev/rack",
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        "node.kubernetes.io/instance-type",
        "team.node.kubernetes.io/pool",
        "kubelet.kubernetes.io/anything",
    ],
)
def test_a_window_selecting_by_a_label_the_kubelet_may_write_is_refused(key: str) -> None:
    """Root on a node holds its kubelet's credentials: by such a label it could put its
    node into a window, or take it out of one while people work on it."""
    for selector in (
        {"matchLabels": {key: "r7"}},
        {"matchExpressions": [{"key": key, "operator": "Exists"}]},
    ):
        spec = {"start": "2026-12-05T14:00:00Z", "end": "2026-12-05T15:00:00Z"}
        with pytest.raises(ValueError, match=f"{key}, which a node's kubelet may write"):
            window({"metadata": {"name": "w"}, "spec": {**spec, "nodeSelector": selector}})


@pytest.mark.parametrize(
    "key", [RACK, "node-role.kubernetes.io/gpu", "example.k8s.io/pool", "kubernetes.io/rack"]
)
def test_a_window_may_select_by_labels_noderestriction_keeps_the_kubelet_off(key: str) -> None:
    spec = {"start": "2026-12-05T14:00:00Z", "end": "2026-12-05T15:00:00Z"}
    found = window(
        {"metadata": {"name": "w"}, "spec": {**spec, "nodeSelector": {"matchLabels": {key: "x"}}}}
    )
    assert found.covers("n1", {key: "x"})

"""The accountant's gauges follow the fleet: a deleted node's heartbeat goes."""

from __future__ import annotations

from lifecycle_data import T0
from prometheus_client import REGISTRY
from shell_fakes import gpunode, healthy_status, node_object, policy_object

from pitcrew.controller.accountant import Accountant
from pitcrew.controller.store import Store

HEARTBEAT = "pitcrew_agent_last_heartbeat_timestamp_seconds"


def heartbeat_of(node: str) -> float | None:
    return REGISTRY.get_sample_value(HEARTBEAT, {"node": node})


def test_a_deleted_nodes_heartbeat_series_is_removed() -> None:
    store = Store()
    store.put("policy", policy_object())
    for name in ("acct-a", "acct-b"):
        store.put("node", node_object(name))
        store.put("gpunode", gpunode(name, healthy_status()))
    accountant = Accountant(store, now=T0)
    accountant.tick(T0)
    assert heartbeat_of("acct-a") == T0.timestamp()
    store.put("node", store.nodes["acct-b"], deleted=True)
    store.put("gpunode", store.gpunodes["acct-b"], deleted=True)
    accountant.tick(T0)
    assert heartbeat_of("acct-b") is None  # the alert on it cannot fire for ever
    assert heartbeat_of("acct-a") == T0.timestamp()

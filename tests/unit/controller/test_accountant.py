"""The accountant's gauges follow the fleet: a deleted node's heartbeat goes."""

from __future__ import annotations

import datetime

from lifecycle_data import T0
from prometheus_client import REGISTRY
from shell_fakes import gpunode, healthy_status, node_object, policy_object

from pitcrew.api.gpunode import Phase
from pitcrew.api.meta import Duration
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


def test_goodput_is_answered_for_each_window_from_phase_time() -> None:
    store = Store()
    store.put("policy", policy_object())
    store.put("node", node_object("acct-c"))
    store.put("gpunode", gpunode("acct-c", healthy_status()))
    accountant = Accountant(store, now=T0)
    for minute in range(1, 31):
        accountant.tick(T0 + datetime.timedelta(minutes=minute))
    out = healthy_status().model_copy(update={"phase": Phase.QUARANTINED})
    store.put("gpunode", gpunode("acct-c", out))
    for minute in range(31, 41):
        accountant.tick(T0 + datetime.timedelta(minutes=minute))
    now = T0 + datetime.timedelta(minutes=40)
    windows = [Duration("5m"), Duration("1h")]
    assert accountant.goodput("fleet", windows, now) == [
        {"window": "5m", "ratio": 0.0},  # quarantined for the last ten minutes
        {"window": "1h", "ratio": 0.75},  # in service 30 of the 40 minutes
    ]
    assert accountant.goodput("nobody", windows, now) == [{"window": "5m"}, {"window": "1h"}]

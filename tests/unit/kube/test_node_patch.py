"""A node edit computed from the watched Node saves a read, and never loses a change
someone else made since: the ``test`` of the resourceVersion refuses it."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace
from typing import Any

import jsonpatch
import pytest
from kubernetes import client

from pitcrew.api.vocabulary import QUARANTINE_TAINT
from pitcrew.core import actions as a
from pitcrew.kube import nodes
from support.shell_fakes import node_object


class Apiserver:
    """One Node, read and JSON-patched as kube-apiserver does (a failed ``test`` is 422)."""

    def __init__(self, node: dict[str, Any]) -> None:
        self.node = node
        self.reads = 0
        self.patches = 0

    def read_node(self, name: str, **_: Any) -> Any:
        self.reads += 1
        return SimpleNamespace(data=json.dumps(self.node).encode())

    def patch_node(self, name: str, ops: list[dict[str, Any]], **_: Any) -> Any:
        self.patches += 1
        try:
            patched = jsonpatch.apply_patch(self.node, ops)
        except jsonpatch.JsonPatchTestFailed as error:
            raise client.ApiException(status=422, reason=str(error)) from error
        patched["metadata"]["resourceVersion"] = str(
            int(patched["metadata"]["resourceVersion"]) + 1
        )
        self.node = patched
        return SimpleNamespace(data=json.dumps(patched).encode())

    def bump(self) -> None:
        self.node["metadata"]["resourceVersion"] = str(
            int(self.node["metadata"]["resourceVersion"]) + 1
        )


@pytest.fixture
def cordon() -> a.Cordon:
    return a.Cordon(
        taint=QUARANTINE_TAINT, value="xid", reason="Quarantined", message="fatal XID 79"
    )


def serve(monkeypatch: pytest.MonkeyPatch, node: dict[str, Any]) -> Apiserver:
    server = Apiserver(node)
    monkeypatch.setattr(client, "CoreV1Api", lambda _api: server)
    return server


def test_an_edit_from_the_watched_node_sends_one_request(
    monkeypatch: pytest.MonkeyPatch, cordon: a.Cordon
) -> None:
    watched = node_object("gpu-node-0001")
    server = serve(monkeypatch, copy.deepcopy(watched))
    patched = nodes.apply_action(client.ApiClient(), "gpu-node-0001", cordon, known=watched)
    assert (server.reads, server.patches) == (0, 1)
    assert patched is not None
    assert patched["spec"]["unschedulable"] is True
    assert [t["key"] for t in patched["spec"]["taints"]] == [QUARANTINE_TAINT]


def test_a_node_changed_since_the_watch_is_read_again_and_its_change_kept(
    monkeypatch: pytest.MonkeyPatch, cordon: a.Cordon
) -> None:
    watched = node_object("gpu-node-0001")
    current = copy.deepcopy(watched)
    current["spec"]["taints"] = [{"key": "example.com/network", "effect": "NoSchedule"}]
    server = serve(monkeypatch, current)
    server.bump()  # someone tainted the node after the watch event the operator holds
    patched = nodes.apply_action(client.ApiClient(), "gpu-node-0001", cordon, known=watched)
    assert (server.reads, server.patches) == (1, 2)
    assert patched is not None
    assert {t["key"] for t in patched["spec"]["taints"]} == {
        "example.com/network",
        QUARANTINE_TAINT,
    }

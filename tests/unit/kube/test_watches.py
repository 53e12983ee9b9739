"""Raw watches against a small HTTP server that answers as the apiserver does."""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from pitcrew.kube import watches

NODES = "/api/v1/nodes"


def node(name: str, version: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": version}}


def line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


class Apiserver:
    """Lists and watches from a script: each list's items and version, each watch's
    lines (or the status it is refused with), in turn; what the client asked for is
    kept."""

    def __init__(
        self, lists: list[tuple[list[dict[str, Any]], str]], streams: list[bytes | int]
    ) -> None:
        self.lists, self.streams = lists, streams
        self.asked: list[dict[str, str]] = []
        self.stop = threading.Event()
        apiserver = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
                apiserver.asked.append(query)
                status = 200
                if query.get("watch"):
                    body = apiserver.streams.pop(0) if apiserver.streams else b""
                    if not apiserver.streams and not apiserver.lists:
                        apiserver.stop.set()
                    if isinstance(body, int):  # the apiserver refuses the watch
                        status, body = body, b"{}"
                else:
                    items, version = apiserver.lists.pop(0)
                    body = json.dumps({"metadata": {"resourceVersion": version}, "items": items})
                    body = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        configuration = client.Configuration(host=f"http://127.0.0.1:{self.server.server_port}")
        self.api = client.ApiClient(configuration)


def test_a_listing_then_its_watch_hand_over_each_object_and_a_gone_version_lists_again() -> None:
    seen: list[tuple[str, Any]] = []
    apiserver = Apiserver(
        lists=[([node("a", "9"), node("b", "10")], "10"), ([node("a", "11")], "20")],
        streams=[
            line("MODIFIED", node("a", "11"))
            + line("BOOKMARK", {"metadata": {"resourceVersion": "12"}})
            + line("DELETED", node("b", "13")),
            line("ERROR", {"code": 410, "message": "too old resource version: 13"}),
            b"",
        ],
    )

    def listed(items: list[dict[str, Any]]) -> None:
        seen.append(("listed", [i["metadata"]["name"] for i in items]))

    def changed(obj: dict[str, Any], deleted: bool) -> None:
        seen.append(("deleted" if deleted else "changed", obj["metadata"]["name"]))

    watches.follow(apiserver.api, NODES, listed=listed, changed=changed, stop=apiserver.stop)
    assert seen == [
        ("listed", ["a", "b"]),
        ("changed", "a"),
        ("deleted", "b"),
        ("listed", ["a"]),
    ]
    versions = [q.get("resourceVersion") for q in apiserver.asked if q.get("watch")]
    assert versions == ["10", "13", "20"]  # from the listing, then the last event seen
    assert all(q.get("allowWatchBookmarks") == "true" for q in apiserver.asked if q.get("watch"))


def test_a_watch_the_apiserver_is_too_busy_for_goes_on_from_the_last_version_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(watches, "PAUSE_SECONDS", 0.01)
    seen: list[tuple[str, Any]] = []
    apiserver = Apiserver(
        lists=[([node("a", "9")], "10")],
        streams=[line("MODIFIED", node("a", "11")), 429, 504, line("MODIFIED", node("a", "14"))],
    )
    watches.follow(
        apiserver.api,
        NODES,
        listed=lambda items: seen.append(("listed", len(items))),
        changed=lambda obj, _: seen.append(("changed", obj["metadata"]["resourceVersion"])),
        stop=apiserver.stop,
    )
    assert seen == [("listed", 1), ("changed", "11"), ("changed", "14")]  # listed once
    versions = [q.get("resourceVersion") for q in apiserver.asked if q.get("watch")]
    assert versions == ["10", "11", "11", "11"]

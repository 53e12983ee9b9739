"""medik8s NodeMaintenances, polled: absent API, no permission, changes that wake
exactly the nodes they name."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from pitcrew.controller.maintenance import ABSENT_SECONDS, NodeMaintenances


def request(name: str, node: str, version: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": version}, "spec": {"nodeName": node}}


class Api:
    """Answers the listing as the apiserver would, one answer per call."""

    def __init__(self, *answers: dict[str, Any] | int) -> None:
        self.answers = list(answers)

    def __call__(self) -> dict[str, Any]:
        answer = self.answers.pop(0)
        if isinstance(answer, int):
            raise client.ApiException(status=answer, reason="said so")
        return answer


def poller(api: Api) -> tuple[NodeMaintenances, list[dict[str, Any]], list[set[str]]]:
    published: list[dict[str, Any]] = []
    woken: list[set[str]] = []
    return (
        NodeMaintenances(api, publish=published.append, wake=lambda n: woken.append(set(n))),
        published,
        woken,
    )


def test_an_absent_api_is_asked_again_minutes_later_and_forbidden_is_said_once() -> None:
    watch, published, woken = poller(Api(404, 403, 403))
    assert watch.poll() == ABSENT_SECONDS
    assert (published, woken) == ([], [])
    assert watch.poll() == ABSENT_SECONDS
    assert watch.poll() == ABSENT_SECONDS
    assert watch._said.startswith("the operator may not list")


def test_a_change_wakes_the_nodes_it_names_and_nothing_else() -> None:
    first = {"items": [request("nm-1", "n1"), request("nm-2", "n2")]}
    again = {"items": [request("nm-1", "n1"), request("nm-2", "n2")]}
    moved = {"items": [request("nm-1", "n1"), request("nm-2", "n3", version="2")]}
    watch, published, woken = poller(Api(first, again, moved, {"items": []}, 500))
    assert watch.poll() == watch.interval
    assert woken == [{"n1", "n2"}]
    watch.poll()  # the same versions: nothing
    assert len(woken) == 1
    watch.poll()
    assert woken[-1] == {"n2", "n3"}
    watch.poll()  # deleted: their nodes are revalidated
    assert woken[-1] == {"n1", "n3"}
    assert published[-1] == {}
    assert watch.poll() == watch.interval  # a 500 is retried at the interval


def watching(api: Api, served: list[str] | None) -> tuple[NodeMaintenances, list[str]]:
    said: list[str] = []
    watch = NodeMaintenances(
        api,
        publish=lambda items: None,
        wake=lambda nodes: None,
        served=lambda: served,
        report=said.append,
    )
    return watch, said


def test_a_version_no_longer_served_keeps_the_requests_and_says_so() -> None:
    held = {"items": [request("nm-1", "n1")]}
    watch, said = watching(Api(held, 404), served=["v1"])
    watch.poll()
    assert watch.poll() == watch.interval  # soon asked again: an upgrade, most likely
    assert set(watch.seen) == {"nm-1"}  # its node stays in Maintenance
    assert "serves v1, not v1beta1" in said[-1]
    assert "1 NodeMaintenances last read are kept" in said[-1]


def test_a_forbidden_listing_keeps_the_requests_and_says_so() -> None:
    watch, said = watching(Api({"items": [request("nm-1", "n1")]}, 403), served=["v1beta1"])
    watch.poll()
    watch.poll()
    assert set(watch.seen) == {"nm-1"}
    assert "403 Forbidden" in said[-1]


def test_an_uninstalled_api_ends_its_requests_and_nothing_is_wrong() -> None:
    watch, said = watching(Api({"items": [request("nm-1", "n1")]}, 404), served=None)
    watch.poll()
    watch.poll()
    assert watch.seen == {}
    assert said[-1] == ""

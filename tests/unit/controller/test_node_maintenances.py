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

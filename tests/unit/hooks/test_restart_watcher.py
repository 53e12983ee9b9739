"""The hook's restart watcher: exits with the rule's code on Pitcrew's request, once."""

from __future__ import annotations

import datetime
import threading
from typing import Any

import pytest

from pitcrew.api.vocabulary import RESTART_REQUESTED_ANNOTATION
from pitcrew.client.progress import ProgressReporter
from pitcrew.client.restart import EXIT_CODE_ENV, RestartWatcher
from pitcrew.core.in_place import encode
from support.hook_patches import Patches
from support.in_place_pods import RULE, container

STARTED = datetime.datetime(2026, 12, 6, 8, 0, tzinfo=datetime.UTC)


class Exits:
    def __init__(self) -> None:
        self.codes: list[int] = []
        self.done = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append(code)
        self.done.set()


def watcher(exits: Exits, *, interval: float = 0.05) -> RestartWatcher:
    """A watcher of the fixture's pod, as the hooks make it (the reporter's client)."""
    reporter = ProgressReporter()
    return RestartWatcher(
        pod=reporter.pod,
        namespace=reporter.namespace,
        core=reporter.core,
        interval=interval,
        clock=lambda: STARTED,
        exit=exits,
    )


def declares(apiserver: Patches, requested: datetime.datetime | None = None) -> None:
    annotations = {RESTART_REQUESTED_ANNOTATION: encode(requested)} if requested else {}
    apiserver.pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pretrain-workers-0-0", "annotations": annotations},
        "spec": {"containers": [container(RULE)]},
    }


def test_a_request_newer_than_the_process_exits_with_the_rules_code(apiserver: Patches) -> None:
    declares(apiserver)
    exits = Exits()
    watching = watcher(exits)
    watching.start()
    try:
        assert not exits.done.wait(0.3)  # polls, no request yet
        declares(apiserver, STARTED + datetime.timedelta(seconds=5))
        assert exits.done.wait(5)
        assert exits.codes == [85]
    finally:
        watching.stop()
        watching.join(5)


def test_a_request_older_than_the_process_is_the_restart_it_already_had(
    apiserver: Patches,
) -> None:
    declares(apiserver, STARTED - datetime.timedelta(seconds=40))
    exits = Exits()
    assert watcher(exits).check()
    assert exits.codes == []


def test_a_pod_without_a_rule_is_read_once_and_not_watched(apiserver: Patches) -> None:
    exits = Exits()
    watching = watcher(exits)
    watching.start()
    watching.join(5)
    assert apiserver.reads == 1
    assert apiserver.paths == []  # a read changes nothing: an empty patch
    assert exits.codes == []


def test_the_exit_code_can_be_set_for_a_launcher_in_between(
    apiserver: Patches, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(EXIT_CODE_ENV, "1")
    apiserver.pod = {
        "metadata": {
            "annotations": {RESTART_REQUESTED_ANNOTATION: encode(STARTED + datetime.timedelta(1))}
        },
        "spec": {},
    }
    exits = Exits()
    assert not watcher(exits).check()
    assert exits.codes == [1]


def test_an_apiserver_away_is_tried_again(apiserver: Patches) -> None:
    declares(apiserver, STARTED + datetime.timedelta(seconds=5))
    exits = Exits()
    failing: list[Any] = []

    class Flaky:
        def __init__(self, real: Any) -> None:
            self.real = real

        def patch_namespaced_pod(self, *args: Any, **kwargs: Any) -> Any:
            if not failing:
                failing.append(1)
                raise ConnectionError("apiserver restarting")
            return self.real.patch_namespaced_pod(*args, **kwargs)

    reporter = ProgressReporter()
    watching = RestartWatcher(
        pod=reporter.pod,
        namespace=reporter.namespace,
        core=lambda: Flaky(reporter.core()),
        interval=0.05,
        clock=lambda: STARTED,
        exit=exits,
    )
    watching.start()
    try:
        assert exits.done.wait(5)
        assert exits.codes == [85]
    finally:
        watching.stop()
        watching.join(5)

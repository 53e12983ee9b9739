"""The hooks' reporter writes on a thread of its own: an apiserver that does not answer
holds that thread, never a training step, and what it writes later is what happened
when it happened."""

from __future__ import annotations

import datetime
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pitcrew.api.vocabulary import PROGRESS_ANNOTATION
from pitcrew.client.background import BackgroundReporter
from pitcrew.client.progress import parse
from pitcrew.core.job_ledger import Progress

T0 = datetime.datetime(2026, 12, 2, 10, 0, tzinfo=datetime.UTC)


class Stalled:
    """An apiserver that takes every PATCH and answers none until released."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.annotations: list[str] = []
        self.arrived = threading.Semaphore(0)

    def reports(self) -> list[Progress]:
        return [parse(text) for text in self.annotations]


@pytest.fixture
def stalled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stalled]:
    server_state = Stalled()

    class Handler(BaseHTTPRequestHandler):
        def do_PATCH(self) -> None:
            body: Any = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            server_state.arrived.release()
            server_state.released.wait(30)
            server_state.annotations.append(body["metadata"]["annotations"][PROGRESS_ANNOTATION])
            answer = b'{"apiVersion": "v1", "kind": "Pod", "metadata": {}}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    yield server_state
    server_state.released.set()
    server.shutdown()


def test_steps_never_wait_for_an_apiserver_that_does_not_answer(stalled: Stalled) -> None:
    reporter = BackgroundReporter(pod="trainer-0", namespace="ml", min_interval=0)
    reporter.step(1)
    assert stalled.arrived.acquire(timeout=30), "the first write never reached the apiserver"
    started = time.monotonic()
    for step in range(2, 1001):  # the first write hangs meanwhile
        reporter.step(step)
    reporter.checkpoint(1000)
    assert time.monotonic() - started < 1.0
    assert not reporter.flush(0.2)  # still held
    stalled.released.set()
    assert reporter.flush(10)
    steps = [r.step for r in stalled.reports()]
    # The steps noted while a write hung were one report, the latest, not a thousand.
    assert steps[0] == 1
    assert steps[-1] == 1000
    assert len(steps) <= 3
    assert stalled.reports()[-1].checkpoint_step == 1000


def test_a_report_written_late_carries_the_time_things_happened(stalled: Stalled) -> None:
    now = [T0]
    reporter = BackgroundReporter(
        pod="trainer-0", namespace="ml", min_interval=0, clock=lambda: now[0]
    )
    reporter.step(9)
    assert stalled.arrived.acquire(timeout=30)
    reporter.checkpoint(10)  # saved at T0 + 1 min, written minutes later
    now[0] = T0 + datetime.timedelta(minutes=1)
    reporter.checkpoint(10)
    now[0] = T0 + datetime.timedelta(minutes=5)
    stalled.released.set()
    assert reporter.flush(10)
    last = stalled.reports()[-1]
    assert (last.checkpoint_step, last.checkpoint_time) == (10, T0 + datetime.timedelta(minutes=1))
    assert last.time == T0 + datetime.timedelta(minutes=1)


def test_a_restart_is_reported_with_the_checkpoint_it_went_back_to(stalled: Stalled) -> None:
    stalled.released.set()
    saved = T0 - datetime.timedelta(hours=1)
    reporter = BackgroundReporter(pod="trainer-0", namespace="ml", min_interval=0)
    reporter.resumed(500, saved)
    reporter.step(501)
    assert reporter.flush(10)
    first = stalled.reports()[0]
    assert (first.step, first.checkpoint_step, first.checkpoint_time) == (501, 500, saved)

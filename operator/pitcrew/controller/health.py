"""The operator's liveness and readiness endpoints (``/healthz``, ``/readyz``).

Served from the start of the process, standbys included: a standby waiting
for the Lease is alive and ready (ready to take over), so Kubernetes never
restarts it for waiting. The leader is alive while

- its reconcile loop ran a round recently (the resync guarantees one every
  ``resync_seconds``), and
- its watches deliver: GPUNodes are rewritten by every agent's heartbeat,
  so a fleet whose GPUNodes have been silent for ``watch_stale_seconds``
  means a watch that froze without closing, the failure a restart fixes.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Check = Callable[[], str | None]
"""Returns None when healthy, else why not."""


def serve(port: int, *, live: Check) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path not in ("/healthz", "/readyz"):
                self.send_error(404)
                return
            problem = live()
            body = (problem or "ok").encode()
            self.send_response(500 if problem else 200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:  # probes every few seconds: no access log
            return

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)  # noqa: S104 - kubelet probes it
    threading.Thread(target=server.serve_forever, daemon=True, name="pitcrew-health").start()
    return server


def leader_check(
    *,
    last_round: Callable[[], datetime.datetime],
    last_event: Callable[[], datetime.datetime | None],
    watched_objects: Callable[[], int],
    resync_seconds: float,
    watch_stale_seconds: float,
    clock: Callable[[], datetime.datetime],
) -> str | None:
    now = clock()
    round_age = (now - last_round()).total_seconds()
    if round_age > 4 * resync_seconds:
        return f"no reconcile round for {round_age:.0f}s: the loop is stuck"
    event = last_event()
    if watched_objects() and event is not None:
        silent = (now - event).total_seconds()
        if silent > watch_stale_seconds:
            return f"no watch event for {silent:.0f}s from a fleet of agents: a watch is frozen"
    return None

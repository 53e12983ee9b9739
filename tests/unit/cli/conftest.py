"""An HTTP server that answers GETs as an apiserver would, from a table of paths,
and a kubeconfig that points at it: the commands run with the real kubernetes
client, its kubeconfig loading and its requests."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {{server: "{server}"}}
users:
- name: someone
  user: {{token: not-a-real-token}}
contexts:
- name: test
  context: {{cluster: test, user: someone}}
current-context: test
"""

Answers = dict[str, tuple[int, Any]]
"""Path (without the query) → status and JSON body; ``/version`` answers unless
told otherwise, any other path is a 404."""

VERSION: Answers = {"/version": (200, {"major": "1", "minor": "37", "gitVersion": "v1.37.2"})}


def write_kubeconfig(folder: Path, server: str) -> Path:
    path = folder / "kubeconfig"
    path.write_text(KUBECONFIG.format(server=server))
    return path


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[Answers], Path]]:
    """``serve(answers)`` starts the server and returns the kubeconfig's path."""
    servers: list[ThreadingHTTPServer] = []

    def start(answers: Answers) -> Path:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                status, body = {**VERSION, **answers}.get(path, (404, {"kind": "Status"}))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return write_kubeconfig(tmp_path, f"http://127.0.0.1:{server.server_address[1]}")

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()

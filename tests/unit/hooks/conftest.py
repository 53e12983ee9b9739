"""An HTTP server that answers the pod patches the hooks make, as the apiserver does,
and records them; every patch is answered with ``Patches.pod``, which is how the restart
watcher reads its pod (an empty patch). The hooks run with the real kubernetes client,
configured from a kubeconfig, exactly as in a pod without in-cluster credentials."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pitcrew.api.vocabulary import PROGRESS_ANNOTATION
from support.hook_patches import Patches


@pytest.fixture
def apiserver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Patches]:
    patches = Patches()

    class Handler(BaseHTTPRequestHandler):
        def do_PATCH(self) -> None:
            body: Any = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if not body:  # the restart watcher's read: an empty patch
                patches.reads += 1
            else:
                patches.paths.append(self.path)
                progress = body["metadata"]["annotations"].get(PROGRESS_ANNOTATION)
                if progress is not None:  # not a heartbeat alone (the process's start)
                    patches.annotations.append(progress)
            answer = json.dumps(patches.pod).encode()
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
    monkeypatch.setenv("POD_NAME", "pretrain-workers-0-0")
    monkeypatch.setenv("POD_NAMESPACE", "research")
    monkeypatch.setenv("NODE_NAME", "gpu-node-7")
    yield patches
    server.shutdown()

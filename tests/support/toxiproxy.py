"""Toxiproxy, the TCP proxy the chaos suite puts between an operator and the apiserver:
latency, connection resets and full partitions of one operator, while the other
reaches the apiserver as before. The server is built from its Go module like the
devcluster's binaries; this drives its HTTP API."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from pitcrew.dev.devcluster import build
from pitcrew.dev.devcluster.cluster import free_port


class Toxiproxy:
    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.api = f"http://127.0.0.1:{self.port}"
        log = (directory / "toxiproxy.log").open("ab")
        self.process = subprocess.Popen(
            [str(build.ensure_toxiproxy()), "-host", "127.0.0.1", "-port", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                self._call("GET", "/version")
                break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"toxiproxy did not start; see {log.name}") from None
                time.sleep(0.2)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.api}{path}", data=data, method=method)
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=10) as answer:
            text = answer.read()
            is_json = answer.headers.get_content_type() == "application/json"
        return json.loads(text) if text and is_json else text.decode()

    def proxy(self, name: str, upstream: str) -> str:
        """A proxy ``name`` to ``upstream`` (host:port); returns where it listens."""
        listen = f"127.0.0.1:{free_port()}"
        self._call(
            "POST",
            "/proxies",
            {"name": name, "listen": listen, "upstream": upstream, "enabled": True},
        )
        return listen

    def kubeconfig(self, name: str, original: Path, out: Path) -> Path:
        """``original`` with its server reached through a new proxy ``name`` (the same
        address family and certificate names: only the port changes)."""
        config = yaml.safe_load(original.read_text())
        cluster = config["clusters"][0]["cluster"]
        server = urlparse(cluster["server"])
        listen = self.proxy(name, f"{server.hostname}:{server.port}")
        cluster["server"] = f"{server.scheme}://{listen}"
        out.write_text(yaml.safe_dump(config))
        return out

    def enabled(self, name: str, enabled: bool) -> None:
        """A disabled proxy drops its connections and refuses new ones: a partition."""
        self._call("POST", f"/proxies/{name}", {"enabled": enabled})

    def toxic(self, proxy: str, toxic: str, kind: str, **attributes: int) -> None:
        self._call(
            "POST",
            f"/proxies/{proxy}/toxics",
            {"name": toxic, "type": kind, "stream": "downstream", "attributes": attributes},
        )

    def remove_toxic(self, proxy: str, toxic: str) -> None:
        self._call("DELETE", f"/proxies/{proxy}/toxics/{toxic}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()

"""A real Prometheus (the Debian package's binary) on loopback, for the tests.

It scrapes the given targets every second and loads Pitcrew's alerting and
recording rules from the chart, so the tests query what a user's Prometheus
would compute.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from pitcrew.dev.devcluster.cluster import free_port

RULES = Path(__file__).resolve().parents[2] / "charts" / "pitcrew" / "files" / "alerts.yaml"


def binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(
            f"{name} not found: install the Debian package `prometheus` "
            "(apt-get install prometheus); .ci/run does this"
        )
    return found


class Prometheus:
    def __init__(self, directory: Path, targets: list[str]) -> None:
        self.port = free_port()
        config = directory / "prometheus.yml"
        config.write_text(
            json.dumps(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(RULES)],
                    "scrape_configs": [
                        {
                            # As a user's Prometheus scrapes: no honor_labels, so the
                            # scrape's own `job` label is on every series beside
                            # Pitcrew's `training_job`.
                            "job_name": "pitcrew",
                            "static_configs": [{"targets": targets}],
                        }
                    ],
                }
            )
        )
        self.log = (directory / "prometheus.log").open("ab")
        self.process = subprocess.Popen(
            [
                binary("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={directory / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"Prometheus did not become ready; see {directory / 'prometheus.log'}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; the result vector (raises on a PromQL error)."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        if body.get("status") != "success":
            raise AssertionError(f"{expr}: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()

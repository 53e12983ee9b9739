"""The pod patches a framework hook made, as the operator reads them."""

from __future__ import annotations

from typing import Any

from pitcrew.client.progress import parse
from pitcrew.core.job_ledger import Progress


class Patches:
    def __init__(self) -> None:
        self.paths: list[str] = []
        self.annotations: list[str] = []
        self.pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {}}
        """What a patch of the pod answers: the pod as it is now."""
        self.reads = 0
        """Empty patches: the restart watcher's reads."""

    def reports(self) -> list[Progress]:
        """Every report written, parsed by the operator's own reader."""
        return [parse(text) for text in self.annotations]

"""`pitcrew status -o json|yaml`: one report, in either notation."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from pitcrew.api.meta import GROUP, VERSION
from pitcrew.cli.main import main

Answers = dict[str, tuple[int, Any]]

POLICY = {
    "metadata": {"name": "gpu-fleet"},
    "spec": {"safety": {"dryRun": True}},
    "status": {"nodes": 2, "unhealthy": 1, "phases": {"Healthy": 1, "Quarantined": 1}},
}
GPUNODES = [
    {"metadata": {"name": "gpu-node-0001"}, "status": {"phase": "Healthy"}},
    {"metadata": {"name": "gpu-node-0002"}, "status": {"phase": "Quarantined"}},
]
FLEET: Answers = {
    f"/apis/{GROUP}/{VERSION}/gpuhealthpolicies": (200, {"items": [POLICY]}),
    f"/apis/{GROUP}/{VERSION}/gpunodes": (200, {"items": GPUNODES}),
}


def status(kubeconfig: Path, output: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["status", "--kubeconfig", str(kubeconfig), "-o", output]) == 0
    return capsys.readouterr().out


def test_yaml_is_the_json_report_in_yaml(
    serve: Callable[[Answers], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = serve(FLEET)
    as_json = json.loads(status(kubeconfig, "json", capsys))
    assert as_json["unhealthy"][0]["node"] == "gpu-node-0002"  # the report is not empty
    assert yaml.safe_load(status(kubeconfig, "yaml", capsys)) == as_json


def test_yaml_keeps_the_reports_order(
    serve: Callable[[Answers], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = serve(FLEET)
    text = status(kubeconfig, "yaml", capsys)
    keys = [line.split(":")[0] for line in text.splitlines() if line[:1].isalpha()]
    assert keys == list(json.loads(status(kubeconfig, "json", capsys)))

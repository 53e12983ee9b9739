"""The distribution: its name is ours, what the production commands import is in its
runtime dependencies, and its license travels in the wheel."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from gpuhealth import distribution

ROOT = Path(__file__).resolve().parents[3]


def project() -> dict[str, Any]:
    found: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return found


def requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", line, maxsplit=1)[0].lower() for line in requirements}


def test_the_distribution_name_is_written_once_in_gpuhealth_distribution() -> None:
    assert project()["name"] == distribution.DISTRIBUTION


def test_the_import_packages_keep_their_names() -> None:
    assert project()["scripts"] == {
        "pitcrew": "pitcrew.cli:main",
        "gpuhealth": "gpuhealth.cli:main",
    }


@pytest.mark.parametrize(
    ("library", "why"),
    [
        ("sushy", "the Redfish reboot, a rung of the default remediation ladder"),
        ("kopf", "the operator"),
        ("pyyaml", "install, chart and CRD generation, status -o yaml"),
        ("rich", "status, simulate"),
        ("urllib3", "request deadlines and connection errors in pitcrew.kube.client"),
    ],
)
def test_what_production_commands_import_is_a_runtime_dependency(library: str, why: str) -> None:
    assert library in requirement_names(project()["dependencies"]), why


def test_the_dev_extra_does_not_hide_a_runtime_dependency() -> None:
    runtime = requirement_names(project()["dependencies"])
    assert not runtime & requirement_names(project()["optional-dependencies"]["dev"])


def test_the_license_files_exist_and_are_in_the_metadata() -> None:
    assert project()["license"] == "Apache-2.0"
    assert project()["license-files"] == ["LICENSE", "NOTICE"]
    license_text = (ROOT / "LICENSE").read_text()
    assert license_text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in license_text
    assert "Copyright The Pitcrew authors" in (ROOT / "NOTICE").read_text()


def test_an_extra_is_named_by_the_distribution() -> None:
    assert distribution.install_hint("lightning") == "pip install 'pitcrew-operator[lightning]'"

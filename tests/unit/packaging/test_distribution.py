"""The distribution: its name is ours and its license travels in the wheel."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from gpuhealth import distribution

ROOT = Path(__file__).resolve().parents[3]


def project() -> dict[str, Any]:
    found: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return found


def test_the_distribution_name_is_written_once_in_gpuhealth_distribution() -> None:
    assert project()["name"] == distribution.DISTRIBUTION


def test_the_import_packages_keep_their_names() -> None:
    assert project()["scripts"] == {
        "pitcrew": "pitcrew.cli:main",
        "gpuhealth": "gpuhealth.cli:main",
    }


def test_the_license_files_exist_and_are_in_the_metadata() -> None:
    assert project()["license"] == "Apache-2.0"
    assert project()["license-files"] == ["LICENSE", "NOTICE"]
    license_text = (ROOT / "LICENSE").read_text()
    assert license_text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in license_text
    assert "Copyright The Pitcrew authors" in (ROOT / "NOTICE").read_text()


def test_an_extra_is_named_by_the_distribution() -> None:
    assert distribution.install_hint("lightning") == "pip install 'pitcrew-operator[lightning]'"

"""scripts/image-sbom.py: the CycloneDX SBOM that `make images` writes beside each archive,
read from an image's root filesystem (here a small fake one)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
VENV = "/opt/pitcrew"
DIGEST = "sha256:" + "ab" * 32
METADATA = {
    "kopf-1.45.2.dist-info": "Name: kopf\nVersion: 1.45.2\nLicense-Expression: MIT\n",
    "PyYAML-6.0.2.dist-info": (
        "Name: PyYAML\nVersion: 6.0.2\nLicense: MIT\n"
        "Classifier: License :: OSI Approved :: MIT License\n"
    ),
    "mystery-1.0.dist-info": "Name: mystery\nVersion: 1.0\nLicense: UNKNOWN\n",
}
DPKG_STATUS = """\
Package: python3.11
Status: install ok installed
Architecture: amd64
Version: 3.11.2-6+deb12u5
Description: Interactive high-level object-oriented language
 a continuation line

Package: removed-long-ago
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0
"""


def load_sbom() -> ModuleType:
    spec = importlib.util.spec_from_file_location("image_sbom", ROOT / "scripts" / "image-sbom.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def image_root(tmp_path: Path) -> Path:
    site = tmp_path / VENV.lstrip("/") / "lib" / "python3.11" / "site-packages"
    for directory, text in METADATA.items():
        (site / directory).mkdir(parents=True)
        (site / directory / "METADATA").write_text(f"Metadata-Version: 2.4\n{text}")
    (tmp_path / "var/lib/dpkg").mkdir(parents=True)
    (tmp_path / "var/lib/dpkg/status").write_text(DPKG_STATUS)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/os-release").write_text('ID=debian\nVERSION_ID="12"\n')
    return tmp_path


def write(image_root: Path, output: Path) -> dict[str, Any]:
    argv = ["--root", str(image_root), "--name", "pitcrew", "--version", "0.1.0"]
    argv += ["--digest", DIGEST, "--output", str(output)]
    assert load_sbom().main(argv) == 0
    document: dict[str, Any] = json.loads(output.read_text())
    return document


def test_python_distributions_and_debian_packages_are_components(
    image_root: Path, tmp_path: Path
) -> None:
    document = write(image_root, tmp_path / "sbom.json")
    assert document["bomFormat"] == "CycloneDX"
    purls = [c["purl"] for c in document["components"]]
    assert purls == [
        "pkg:pypi/kopf@1.45.2",
        "pkg:pypi/mystery@1.0",
        "pkg:pypi/pyyaml@6.0.2",
        "pkg:deb/debian/python3.11@3.11.2-6%2Bdeb12u5?arch=amd64&distro=debian-12",
    ]


def test_licenses_come_from_the_expression_or_the_classifiers(
    image_root: Path, tmp_path: Path
) -> None:
    document = write(image_root, tmp_path / "sbom.json")
    licenses = {c["name"]: c.get("licenses") for c in document["components"]}
    assert licenses["kopf"] == [{"expression": "MIT"}]
    assert licenses["PyYAML"] == [{"license": {"name": "MIT License"}}]
    assert licenses["mystery"] is None


def test_the_image_is_named_by_its_digest(image_root: Path, tmp_path: Path) -> None:
    document = write(image_root, tmp_path / "sbom.json")
    image = document["metadata"]["component"]
    assert image["type"] == "container"
    assert image["purl"] == f"pkg:oci/pitcrew@sha256%3A{'ab' * 32}?tag=0.1.0"


def test_the_same_image_gives_the_same_file(image_root: Path, tmp_path: Path) -> None:
    write(image_root, tmp_path / "one.json")
    write(image_root, tmp_path / "two.json")
    assert (tmp_path / "one.json").read_bytes() == (tmp_path / "two.json").read_bytes()


def test_an_image_without_the_virtual_environment_is_refused(tmp_path: Path) -> None:
    argv = ["--root", str(tmp_path), "--name", "pitcrew", "--version", "0.1.0"]
    argv += ["--digest", DIGEST, "--output", str(tmp_path / "sbom.json")]
    assert load_sbom().main(argv) == 1
    assert not (tmp_path / "sbom.json").exists()

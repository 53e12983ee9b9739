"""A CycloneDX 1.5 SBOM of an image, read from its root filesystem.

``scripts/build-images.sh`` mounts each image it builds (``podman image mount``) and
runs this on the mount, so nothing runs inside the image and no container
runtime is needed. It lists the Python distributions of the image's virtual
environment, read with ``importlib.metadata``, and the Debian packages of its
base, read from dpkg's status file. Only the standard library is used: the
script runs on the build host's ``python3``.

The file is a function of the image alone: components are sorted, the serial
number is derived from the image's digest, and the timestamp is
SOURCE_DATE_EPOCH, so building the same image again writes the same file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from importlib.metadata import Distribution, distributions
from pathlib import Path
from typing import Any
from urllib.parse import quote

SPEC_VERSION = "1.5"
DPKG_STATUS = "var/lib/dpkg/status"
OS_RELEASE = ("etc/os-release", "usr/lib/os-release")
LICENSE_CLASSIFIER = "License :: OSI Approved :: "
# A free-text License field longer than this is the licence's full text, not its name.
LICENSE_NAME_MAX = 80


def _purl_part(text: str) -> str:
    return quote(text, safe=".-_~")


def python_components(site_packages: Iterable[Path]) -> list[dict[str, Any]]:
    """The distributions installed in ``site_packages``, one component each."""
    seen: dict[str, dict[str, Any]] = {}
    for dist in distributions(path=[str(p) for p in site_packages]):
        name = dist.metadata["Name"]
        if not name:
            continue
        version = dist.version
        normalized = name.lower().replace("_", "-").replace(".", "-")
        purl = f"pkg:pypi/{_purl_part(normalized)}@{_purl_part(version)}"
        component: dict[str, Any] = {
            "type": "library",
            "bom-ref": purl,
            "name": name,
            "version": version,
            "purl": purl,
        }
        licenses = _python_licenses(dist)
        if licenses:
            component["licenses"] = licenses
        seen.setdefault(purl, component)
    return sorted(seen.values(), key=lambda c: (c["name"].lower(), c["version"]))


def _python_licenses(dist: Distribution) -> list[dict[str, Any]]:
    metadata = dist.metadata
    expression = metadata["License-Expression"]
    if expression:
        return [{"expression": expression}]
    named = [
        c.removeprefix(LICENSE_CLASSIFIER)
        for c in metadata.get_all("Classifier") or []
        if c.startswith(LICENSE_CLASSIFIER)
    ]
    if not named:
        text = (metadata["License"] or "").strip()
        if text and "\n" not in text and len(text) <= LICENSE_NAME_MAX and text != "UNKNOWN":
            named = [text]
    return [{"license": {"name": n}} for n in named]


def _dpkg_stanzas(text: str) -> Iterator[dict[str, str]]:
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in block.splitlines():
            if line[:1] in (" ", "\t"):
                continue  # a continuation line: descriptions and conffiles, not needed
            key, _, value = line.partition(":")
            fields[key] = value.strip()
        if fields:
            yield fields


def os_release(root: Path) -> dict[str, str]:
    for name in OS_RELEASE:
        path = root / name
        if path.is_file():
            pairs = (line.partition("=") for line in path.read_text().splitlines())
            return {k: v.strip('"') for k, sep, v in pairs if sep}
    return {}


def debian_components(root: Path) -> list[dict[str, Any]]:
    """The packages dpkg lists as installed under ``root``, one component each."""
    status = root / DPKG_STATUS
    if not status.is_file():
        return []
    release = os_release(root)
    distro = f"{release.get('ID', 'debian')}-{release.get('VERSION_ID', 'unknown')}"
    components = []
    for fields in _dpkg_stanzas(status.read_text()):
        if not fields.get("Status", "").endswith(" installed"):
            continue
        name, version, arch = fields["Package"], fields["Version"], fields["Architecture"]
        purl = (
            f"pkg:deb/{_purl_part(release.get('ID', 'debian'))}/{_purl_part(name)}"
            f"@{_purl_part(version)}?arch={arch}&distro={distro}"
        )
        components.append(
            {
                "type": "library",
                "bom-ref": purl,
                "name": name,
                "version": version,
                "purl": purl,
            }
        )
    return sorted(components, key=lambda c: c["name"])


def sbom(
    *,
    root: Path,
    venv: str,
    name: str,
    version: str,
    digest: str,
    epoch: int,
) -> dict[str, Any]:
    """The SBOM of the image ``name:version`` (manifest ``digest``) unpacked at ``root``."""
    site_packages = sorted((root / venv.lstrip("/")).glob("lib/python3*/site-packages"))
    image_purl = f"pkg:oci/{_purl_part(name)}@{_purl_part(digest)}?tag={_purl_part(version)}"
    return {
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, image_purl)}",
        "version": 1,
        "metadata": {
            "timestamp": datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "tools": {
                "components": [{"type": "application", "name": "pitcrew scripts/image-sbom.py"}]
            },
            "component": {
                "type": "container",
                "bom-ref": image_purl,
                "name": name,
                "version": version,
                "purl": image_purl,
            },
        },
        "components": python_components(site_packages) + debian_components(root),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="the image's root filesystem")
    parser.add_argument("--venv", default="/opt/pitcrew", help="the virtual environment in it")
    parser.add_argument("--name", required=True, help="image name, e.g. pitcrew")
    parser.add_argument("--version", required=True, help="image tag")
    parser.add_argument("--digest", required=True, help="manifest digest, sha256:...")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    document = sbom(
        root=args.root,
        venv=args.venv,
        name=args.name,
        version=args.version,
        digest=args.digest,
        epoch=int(os.environ.get("SOURCE_DATE_EPOCH", "0")),
    )
    python = [c for c in document["components"] if c["purl"].startswith("pkg:pypi/")]
    if not python:
        print(f"sbom: no Python distributions under {args.root}{args.venv}", file=sys.stderr)
        return 1
    args.output.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

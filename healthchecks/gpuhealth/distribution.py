"""The distribution that ships ``gpuhealth`` and ``pitcrew``: its name and version.

One wheel holds both import packages, so the name is written once, here, in the
package that the other imports (``gpuhealth`` imports nothing of ``pitcrew``). It
is not ``pitcrew``: that name on PyPI belongs to an unrelated project, and
``importlib.metadata.version("pitcrew")`` would report that project's version
wherever it happens to be installed. ``pyproject.toml``'s ``[project].name`` is
held equal to :data:`DISTRIBUTION` by a unit test.

An extra is installed as ``pip install 'pitcrew-operator[lightning]'``; error
messages that name one build the line with :func:`install_hint`.
"""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "pitcrew-operator"

UNKNOWN_VERSION = "0.0.0+unknown"

_SOURCE_PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def install_hint(extra: str) -> str:
    """The command that installs ``extra``: ``pip install 'pitcrew-operator[EXTRA]'``."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def version() -> str:
    """The installed distribution's version; from a source tree that was never
    installed, the version its ``pyproject.toml`` declares; else ``0.0.0+unknown``."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return _source_version(_SOURCE_PYPROJECT)


def _source_version(pyproject: Path) -> str:
    try:
        project = tomllib.loads(pyproject.read_text())["project"]
    except (OSError, tomllib.TOMLDecodeError, KeyError):
        return UNKNOWN_VERSION
    if project.get("name") != DISTRIBUTION:  # not our tree: some other project's file
        return UNKNOWN_VERSION
    return str(project.get("version", UNKNOWN_VERSION))

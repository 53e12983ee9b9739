"""`--version` on both command lines: the distribution's version, from its metadata,
or from the source tree's pyproject.toml where it was never installed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path

import pytest

import gpuhealth
import pitcrew
from gpuhealth import distribution
from gpuhealth.cli import main as gpuhealth_main
from pitcrew.cli.main import main as pitcrew_main

PYPROJECT = """\
[project]
name = "{name}"
version = "{version}"
"""


@pytest.mark.parametrize(
    ("main", "prog"), [(pitcrew_main, "pitcrew"), (gpuhealth_main, "gpuhealth")]
)
def test_version_prints_the_program_and_the_distributions_version(
    main: Callable[[Sequence[str]], int], prog: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"{prog} {distribution.version()}\n"


def test_both_packages_carry_the_distributions_version() -> None:
    assert pitcrew.__version__ == gpuhealth.__version__ == distribution.version()


def test_the_version_is_the_installed_distributions(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def installed(name: str) -> str:
        asked.append(name)
        return "7.8.9"

    monkeypatch.setattr(metadata, "version", installed)
    assert distribution.version() == "7.8.9"
    assert asked == ["pitcrew-operator"]  # never `pitcrew`, another project's name


def test_a_source_tree_never_installed_reads_its_pyproject(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(PYPROJECT.format(name="pitcrew-operator", version="1.2.3"))
    monkeypatch.setattr(metadata, "version", not_installed)
    monkeypatch.setattr(distribution, "_SOURCE_PYPROJECT", pyproject)
    assert distribution.version() == "1.2.3"


@pytest.mark.parametrize(
    "text", [None, "not = [toml", PYPROJECT.format(name="pitcrew", version="0.0.3")]
)
def test_without_metadata_or_our_pyproject_the_version_is_unknown(
    text: str | None, tmp_path: Path
) -> None:
    pyproject = tmp_path / "pyproject.toml"
    if text is not None:
        pyproject.write_text(text)
    assert distribution._source_version(pyproject) == distribution.UNKNOWN_VERSION

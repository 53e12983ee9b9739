"""The Dockerfile: it parses, its stages are what the chart and docs name, its
entry points exist in the package, and nothing runs as root.

No container engine runs here; this is what can be checked without one.
"""

from __future__ import annotations

import tomllib
from importlib import import_module
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

ROOT = Path(__file__).resolve().parents[3]


def instructions() -> list[dict[str, str]]:
    parser = DockerfileParser(path=str(ROOT / "Dockerfile"))
    return list(parser.structure)


def stages() -> dict[str, list[dict[str, str]]]:
    found: dict[str, list[dict[str, str]]] = {}
    current = ""
    for instruction in instructions():
        if instruction["instruction"] == "FROM":
            current = instruction["value"].split(" AS ")[-1]
            found[current] = []
        elif current:
            found[current].append(instruction)
    return found


def test_stages_and_the_default_target() -> None:
    assert list(stages()) == ["build", "probe", "pitcrew"]  # last = default


def test_every_image_starts_from_a_python_the_package_supports() -> None:
    """One base for both images, a build-arg (`make images` passes a local one),
    whose default is a public image with a Python that requires-python accepts."""
    bases = [i["value"].split()[0] for i in instructions() if i["instruction"] == "FROM"]
    assert set(bases) == {"${PYTHON_IMAGE}"}
    default = next(
        i["value"].split("=", 1)[1]
        for i in instructions()
        if i["instruction"] == "ARG" and i["value"].startswith("PYTHON_IMAGE=")
    )
    minor = int(default.removeprefix("python:3.").split("-")[0])
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert minor >= int(requires.removeprefix(">=3."))


def test_only_the_package_sources_are_copied_in() -> None:
    """No .venv, tests or docs in an image: what is copied from the context."""
    copied = {
        source
        for i in instructions()
        if i["instruction"] == "COPY" and not i["value"].startswith("--from=")
        for source in i["value"].split()[:-1]
    }
    assert copied == {
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "NOTICE",
        "operator",
        "healthchecks",
    }


def test_images_run_pitcrew_as_an_unprivileged_user() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name in ("probe", "pitcrew"):
        stage = stages()[name]
        user = [i["value"] for i in stage if i["instruction"] == "USER"]
        assert user == ["65532:65532"]
        entry = next(i["value"] for i in stage if i["instruction"] == "ENTRYPOINT")
        assert entry == '["pitcrew"]'
        module, function = scripts["pitcrew"].split(":")
        assert callable(getattr(import_module(module), function))


def test_subcommands_the_images_and_the_chart_use_exist() -> None:
    from pitcrew.cli.main import build_parser  # noqa: PLC0415

    for used in ("operator", "agent", "probe", "probe-pair"):
        with pytest.raises(SystemExit) as shown:
            build_parser().parse_args([used, "--help"])
        assert shown.value.code == 0

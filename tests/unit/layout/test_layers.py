"""The package's layers: what a folder may hold, and what a production process loads."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pitcrew

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = Path(pitcrew.__file__).parent


def layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    return [name.strip() for layer in contract["layers"] for name in layer.split("|")]


def test_every_folder_of_the_package_is_a_layer_of_the_contract() -> None:
    entries = {
        p.name for p in PACKAGE.iterdir() if not p.name.startswith("__") and p.name != "py.typed"
    }
    assert entries == set(layers())


def loaded_by(*argv: str) -> set[str]:
    probe = (
        "import sys, runpy\n"
        f"sys.argv = ['pitcrew', *{list(argv)!r}]\n"
        "try:\n"
        "    runpy.run_module('pitcrew.cli', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('\\n'.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return set(done.stderr.split())


def in_package(modules: set[str], *packages: str) -> set[str]:
    return {m for m in modules if any(m == p or m.startswith(p + ".") for p in packages)}


def test_the_operator_command_loads_neither_dev_tooling_nor_the_simulator() -> None:
    modules = loaded_by("operator", "--help")
    assert "pitcrew.cli.main" in modules  # the probe did run the command line
    assert not in_package(modules, "pitcrew.dev", "pitcrew.simulate")


def test_the_agent_command_loads_neither_dev_tooling_nor_the_operator_shell() -> None:
    modules = loaded_by("agent", "--help")
    assert not in_package(modules, "pitcrew.dev", "pitcrew.simulate", "kopf")


def test_the_simulate_command_loads_no_dev_tooling() -> None:
    modules = loaded_by("simulate", "--help")
    assert "pitcrew.simulate.command" in modules
    assert not in_package(modules, "pitcrew.dev")


def test_dev_tooling_is_loaded_only_when_asked_for() -> None:
    assert "pitcrew.dev.stack" not in loaded_by("operator", "--help")
    assert "pitcrew.dev.devcluster" in loaded_by("devcluster", "status", "--dir", "/nonexistent")


def test_the_operator_process_loads_neither_dev_tooling_nor_the_simulator() -> None:
    probe = (
        "import sys, pitcrew.controller.operator, pitcrew.node.agent, pitcrew.node.probe\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    modules = set(done.stdout.split())
    assert "kopf" in modules
    assert not in_package(modules, "pitcrew.dev", "pitcrew.simulate")

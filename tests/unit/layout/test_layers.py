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


def test_the_operator_command_loads_nothing_from_the_simulation() -> None:
    modules = loaded_by("operator", "--help")
    assert "pitcrew.cli.main" in modules  # the probe did run the command line
    assert not {m for m in modules if m == "pitcrew.sim" or m.startswith("pitcrew.sim.")}


def test_the_agent_command_loads_neither_the_simulation_nor_the_operator_shell() -> None:
    modules = loaded_by("agent", "--help")
    assert not {m for m in modules if m.startswith(("pitcrew.sim", "kopf"))}


def test_the_simulation_is_loaded_only_when_asked_for() -> None:
    assert "pitcrew.sim.stack" not in loaded_by("operator", "--help")
    assert "pitcrew.sim.devcluster" in loaded_by("devcluster", "status", "--dir", "/nonexistent")


def test_the_operator_process_loads_nothing_from_the_simulation() -> None:
    probe = (
        "import sys, pitcrew.controller.operator, pitcrew.node.agent, pitcrew.node.probe\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    modules = set(done.stdout.split())
    assert "kopf" in modules
    assert not {m for m in modules if m.startswith("pitcrew.sim")}

"""`pitcrew simulate` with input it cannot run: one line that says why, exit status 2.

The simulator raises :class:`SimulationInputError` (a ``PitcrewError``); the command
line prints its message after ``pitcrew simulate:`` and returns 2, as argparse does
for a bad flag. Every case here fails before the first simulated second.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pitcrew.api.errors import PitcrewError
from pitcrew.cli.main import main as cli
from pitcrew.simulate import command
from pitcrew.simulate.errors import SimulationError, SimulationInputError

EXAMPLE_POLICY = Path(__file__).parents[3] / "examples" / "gpuhealthpolicy.yaml"
NOT_A_POLICY = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"
INVALID_POLICY = "kind: GPUHealthPolicy\nspec:\n  spares:\n    count: many\n"


def test_the_simulators_errors_are_pitcrew_errors() -> None:
    assert issubclass(SimulationInputError, SimulationError)
    assert issubclass(SimulationError, PitcrewError)


def test_a_policy_file_that_cannot_be_read_is_bad_input(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    with pytest.raises(SimulationInputError, match=f"^{re.escape(f'cannot read {missing}: ')}"):
        command.main(["--policy", str(missing)])


def test_a_file_of_another_kind_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "configmap.yaml"
    path.write_text(NOT_A_POLICY)
    with pytest.raises(SimulationInputError, match=r"is not a GPUHealthPolicy \(kind\)$"):
        command.main(["--policy", str(path)])


def test_an_invalid_policy_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "invalid.yaml"
    path.write_text(INVALID_POLICY)
    with pytest.raises(SimulationInputError, match="is not a valid GPUHealthPolicy:\n"):
        command.main(["--policy", str(path)])


def test_two_policies_of_one_name_are_bad_input() -> None:
    policy = str(EXAMPLE_POLICY)
    with pytest.raises(SimulationInputError, match=r"^two policies share a name: "):
        command.main(["--policy", policy, "--policy", policy])


def test_a_job_larger_than_its_pool_is_bad_input() -> None:
    with pytest.raises(SimulationInputError, match="do not fit in a pool of 0 nodes"):
        command.main(["--nodes", "0", "--baseline"])


def test_the_command_line_prints_one_line_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.yaml"
    assert cli(["simulate", "--policy", str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"pitcrew simulate: cannot read {missing}: ")
    assert captured.err.count("\n") == 1

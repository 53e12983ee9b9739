"""A command that talks to a cluster fails in one line, never a traceback, when it
cannot: a kubeconfig it cannot use is exit 2 (pointed at the wrong file), a server
that does not answer or answers an error is exit 1."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pitcrew.api.meta import GROUP, VERSION
from pitcrew.cli.main import main

CLUSTER_COMMANDS = ["status", "install", "operator"]
UNREACHABLE = "https://127.0.0.1:1"
"""Port 1 on loopback: nothing listens there, so the connection is refused at once."""

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster: {{server: "{server}", insecure-skip-tls-verify: true}}
users:
- name: someone
  user: {{token: not-a-real-token}}
contexts:
- name: nowhere
  context: {{cluster: nowhere, user: someone}}
current-context: nowhere
"""


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    error = capsys.readouterr().err
    assert error.count("\n") == 1, error
    return error.rstrip("\n")


@pytest.mark.parametrize("command", CLUSTER_COMMANDS)
def test_a_missing_kubeconfig_is_one_line_naming_it_and_exit_2(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    assert main([command, "--kubeconfig", str(missing)]) == 2
    assert one_line(capsys) == (
        f"pitcrew {command}: no kubeconfig at {missing}: pass --kubeconfig FILE or set $KUBECONFIG"
    )


def test_a_kubeconfig_that_is_not_yaml_is_one_line_with_the_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nclusters: [\n")
    assert main(["status", "--kubeconfig", str(broken)]) == 2
    assert (
        one_line(capsys)
        == f"pitcrew status: cannot read the kubeconfig {broken}: not YAML (line 3)"
    )


def test_a_file_that_is_no_kubeconfig_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "values.yaml"
    other.write_text("replicas: 3\n")
    assert main(["status", "--kubeconfig", str(other)]) == 2
    assert one_line(capsys).startswith(f"pitcrew status: cannot use the kubeconfig {other}: ")


@pytest.mark.parametrize("command", CLUSTER_COMMANDS)
def test_an_unreachable_server_is_one_line_naming_it_and_exit_1(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG.format(server=UNREACHABLE))
    assert main([command, "--kubeconfig", str(kubeconfig)]) == 1
    assert one_line(capsys) == (
        f"pitcrew {command}: cannot reach the cluster at {UNREACHABLE}: Connection refused"
    )


def test_an_error_the_apiserver_answers_is_one_line_with_its_message_and_exit_1(
    serve: Callable[[dict[str, tuple[int, Any]]], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    denied = {"kind": "Status", "message": "gpuhealthpolicies.pitcrew.dev is forbidden"}
    kubeconfig = serve({f"/apis/{GROUP}/{VERSION}/gpuhealthpolicies": (403, denied)})
    assert main(["status", "--kubeconfig", str(kubeconfig)]) == 1
    assert one_line(capsys) == (
        "pitcrew status: the apiserver answered 403 Forbidden: "
        "gpuhealthpolicies.pitcrew.dev is forbidden"
    )

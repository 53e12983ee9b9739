"""`--help` shows each option's default, once, where it says something."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pytest

from gpuhealth.arguments import Parser
from gpuhealth.cli import build_parser as gpuhealth_parser
from pitcrew.cli.main import build_parser as pitcrew_parser


def help_of(parser: argparse.ArgumentParser, *command: str) -> str:
    """The help text of a subcommand, as ``--help`` prints it (unwrapped)."""
    for name in command:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return " ".join(parser.format_help().split())


def toy() -> Parser:
    parser = Parser(prog="toy")
    parser.add_argument("--port", type=int, default=9400)
    parser.add_argument("--mode", default="fast", help="how to run")
    parser.add_argument("--dir", default=None, help="where (default: a temporary one)")
    parser.add_argument("--verbose", action="store_true", help="say more")
    parser.add_argument("--limit", default=None, help="at most this many")
    return parser


def test_an_option_without_help_shows_its_default() -> None:
    assert "--port PORT (default: 9400)" in help_of(toy())


def test_an_option_with_help_shows_its_default_after_it() -> None:
    assert "--mode MODE how to run (default: fast)" in help_of(toy())


@pytest.mark.parametrize(
    "shown",
    [
        "--dir DIR where (default: a temporary one) --verbose",  # its own words, once
        "--verbose say more --limit",  # a switch: no "default: False"
        "--limit LIMIT at most this many",  # None: no "default: None"
    ],
)
def test_a_default_that_says_nothing_or_is_already_said_is_not_added(shown: str) -> None:
    text = help_of(toy())
    assert shown in text
    assert "default: False" not in text
    assert "default: None" not in text


@pytest.mark.parametrize(
    ("parser", "command", "shown"),
    [
        (pitcrew_parser, ("agent",), "--metrics-port METRICS_PORT (default: 9400)"),
        (pitcrew_parser, ("status",), "(default: table)"),
        (pitcrew_parser, ("devcluster", "up"), "--nodes NODES (default: 8)"),
        (pitcrew_parser, ("operator",), "(default: 15s)"),
        (gpuhealth_parser, ("check",), "--suite {passive,quick,full} (default: passive)"),
        (gpuhealth_parser, ("check",), "--gpus GPUS sim backend GPU count (default: 8)"),
    ],
)
def test_both_command_lines_show_their_defaults(
    parser: Callable[[], argparse.ArgumentParser], command: tuple[str, ...], shown: str
) -> None:
    assert shown in help_of(parser(), *command)

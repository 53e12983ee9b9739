"""The argument parser of both command lines, ``gpuhealth`` and ``pitcrew``: every
option's default in its ``--help``.

It lives here because ``pitcrew`` imports ``gpuhealth`` and never the other way
round; both ship in one distribution. argparse's own
``ArgumentDefaultsHelpFormatter`` shows a default only for an option that has help
text, and shows it even where it says nothing (``default: None`` for an option
whose help says what happens without it, ``default: False`` for a switch), or
twice where the help already gives it; :class:`Parser` gives every option with a
default worth showing a help that shows it, once.
"""

from __future__ import annotations

import argparse
from typing import Any

SHOWN_DEFAULT = "(default: %(default)s)"


def says_something(default: Any) -> bool:
    """Whether a default is worth showing: not None, not a switch's False, not
    argparse's "leave it out" (``SUPPRESS``)."""
    return default is not None and default is not False and default is not argparse.SUPPRESS


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's, showing a default only where it says something and the help
    does not already give it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if not says_something(action.default) or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """A parser whose help shows each option's default; ``add_subparsers`` makes
    every subcommand's parser of its parent's class, so theirs do too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        # argparse formats no help, default included, for an option without help text.
        if not action.help and action.option_strings and says_something(action.default):
            action.help = SHOWN_DEFAULT
        return action

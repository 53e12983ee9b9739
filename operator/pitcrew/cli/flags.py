"""The ``pitcrew operator`` flags, generated from :class:`~pitcrew.api.settings.OperatorSettings`.

One flag per settings field (:func:`add_settings_flags`), named as
:mod:`pitcrew.api.settings` says, its help the field's docstring and its default the
field's. argparse leaves a flag that was not given out of the namespace, so the
model alone supplies defaults; :func:`settings_from` turns the given flags' text into
values and lets the model validate them, so a bad value is refused with one line
that names the flag, by the same rules as a chart value.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from pydantic import ValidationError

from pitcrew.api.errors import PitcrewError
from pitcrew.api.meta import Duration
from pitcrew.api.settings import OperatorSettings, Setting, settings_fields

_SECONDS = re.compile(r"[0-9]+(\.[0-9]+)?")
_METAVARS = {int: "N", Duration: "DURATION", tuple: "A,B", dict: "JSON"}


class FlagError(PitcrewError):
    """A flag's value the settings refuse; the message names the flag."""


def _help(setting: Setting) -> str:
    text = setting.description.replace("``", "`").replace("%", "%%")
    return f"{text} (default: {setting.default_text})"


def add_settings_flags(parser: argparse.ArgumentParser) -> None:
    """A flag for every settings field; the value is checked by :func:`settings_from`."""
    for setting in settings_fields():
        names = (setting.flag, *setting.aliases)
        if setting.kind is bool:
            parser.add_argument(
                *names,
                dest=setting.key,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=_help(setting),
            )
        else:
            parser.add_argument(
                *names,
                dest=setting.key,
                default=argparse.SUPPRESS,
                metavar=_METAVARS.get(setting.kind, "TEXT"),
                help=_help(setting),
            )


def _value(setting: Setting, given: Any) -> Any:
    """The flag's text as the model's input: a list from commas, an object from JSON,
    seconds from a bare number; the rest the model parses itself."""
    if not isinstance(given, str):
        return given  # a boolean flag
    if setting.kind is tuple:
        return tuple(item for item in given.split(",") if item)
    if setting.kind is dict:
        try:
            return json.loads(given)
        except json.JSONDecodeError as error:
            raise FlagError(f"{setting.flag}: not JSON ({error.msg}): {given!r}") from None
    if setting.kind is Duration and _SECONDS.fullmatch(given):
        return f"{given}s"
    return given


def _flag_of(location: tuple[int | str, ...]) -> str:
    path = tuple(str(part) for part in location)
    for setting in settings_fields():
        if path in (setting.path, tuple(setting.value_path.split("."))):
            return setting.flag
    return ".".join(path)


def settings_from(args: argparse.Namespace) -> OperatorSettings:
    """The settings the parsed flags ask for; :class:`FlagError` names the first flag
    whose value the settings refuse."""
    given = vars(args)
    values = {s.key: _value(s, given[s.key]) for s in settings_fields() if s.key in given}
    try:
        return OperatorSettings.from_values(values)
    except ValidationError as error:
        first = error.errors()[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        raise FlagError(f"{_flag_of(first['loc'])}: {message} (got {first['input']!r})") from None

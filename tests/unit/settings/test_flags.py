"""`pitcrew operator`'s flags are generated from the settings model, one per field."""

from __future__ import annotations

import argparse
import datetime
from typing import Any

import pytest

from pitcrew.api.meta import Duration
from pitcrew.api.settings import OperatorSettings, Setting, settings_fields
from pitcrew.cli import flags
from pitcrew.cli.main import build_parser, main


def parse(*argv: str) -> OperatorSettings:
    return flags.settings_from(build_parser().parse_args(["operator", *argv]))


def value_at(settings: OperatorSettings, setting: Setting) -> Any:
    found: Any = settings
    for name in setting.path:
        found = getattr(found, name)
    return found


def other_value(setting: Setting) -> tuple[list[str], Any]:
    """Arguments that set ``setting`` to something else than its default, and the value."""
    name = setting.flag.removeprefix("--")
    if setting.kind is bool:
        return ([f"--no-{name}"] if setting.default else [f"--{name}"]), not setting.default
    if setting.kind is int:
        return [setting.flag, "7"], 7
    if setting.kind is Duration:
        return [setting.flag, "7m"], datetime.timedelta(minutes=7)
    if setting.kind is tuple:
        return [setting.flag, "a,b"], ("a", "b")
    if setting.kind is dict:
        return [setting.flag, '{"requests": {"cpu": "1"}}'], {"requests": {"cpu": "1"}}
    return [setting.flag, "other"], "other"


@pytest.fixture
def help_text(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        main(["operator", "--help"])
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("setting", settings_fields(), ids=lambda s: s.key)
def test_every_setting_has_a_flag_that_shows_its_default(setting: Setting) -> None:
    parser = argparse.ArgumentParser()
    flags.add_settings_flags(parser)
    action = parser._option_string_actions[setting.flag]
    assert all(parser._option_string_actions[alias] is action for alias in setting.aliases)
    assert action.dest == setting.key
    assert action.default is argparse.SUPPRESS  # the model alone supplies defaults
    assert str(action.help).endswith(f"(default: {setting.default_text})")


def test_the_help_lists_every_flag_with_the_fields_docstring(help_text: str) -> None:
    assert all(setting.flag in help_text for setting in settings_fields())
    assert "Threads executing actions against the API in parallel. (default: 32)" in help_text
    assert "--rounds-resync DURATION, --resync-seconds DURATION" in help_text


@pytest.mark.parametrize("setting", settings_fields(), ids=lambda s: s.key)
def test_each_flag_sets_its_own_field(setting: Setting) -> None:
    argv, expected = other_value(setting)
    settings = parse(*argv)
    assert value_at(settings, setting) == expected
    assert value_at(OperatorSettings(), setting) != expected


def test_without_flags_every_setting_is_the_models_default() -> None:
    assert parse() == OperatorSettings()


def test_a_duration_flag_takes_a_duration() -> None:
    settings = parse("--rounds-resync", "1m30s", "--health-watch-stale=1h")
    assert settings.rounds.resync == datetime.timedelta(seconds=90)
    assert str(settings.rounds.resync) == "1m30s"
    assert settings.health.watch_stale == datetime.timedelta(hours=1)


def test_the_flags_that_took_seconds_keep_their_names_and_meaning() -> None:
    settings = parse("--lease-seconds", "4", "--resync-seconds", "2", "--slurm-seconds", "0.5")
    assert settings.leader.lease_duration == datetime.timedelta(seconds=4)
    assert settings.rounds.resync == datetime.timedelta(seconds=2)
    assert settings.slurm.interval == datetime.timedelta(seconds=0.5)


def test_todays_flags_keep_their_names() -> None:
    settings = parse(
        "--namespace=ops", "--dry-run", "--no-leader-election", "--identity=op-0",
        "--metrics-port=0", "--health-port=0", "--image-pull-secrets=a,b",
        "--job-runtime-class=nvidia", "--max-jobs=10", "--account-prefix=rel-pitcrew",
    )  # fmt: skip
    assert (settings.namespace, settings.dry_run, settings.leader.election) == ("ops", True, False)
    assert settings.leader.identity == "op-0"
    assert (settings.metrics.port, settings.health.port, settings.metrics.max_jobs) == (0, 0, 10)
    assert settings.jobs.image_pull_secrets == ("a", "b")
    assert (settings.jobs.runtime_class, settings.jobs.account_prefix) == ("nvidia", "rel-pitcrew")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rounds-resync", "soon"], "--rounds-resync: invalid duration 'soon'"),
        (["--lease-seconds", "1"], "--leader-lease-duration: must be at least 3s, not 1s"),
        (["--health-watch-stale", "0s"], "--health-watch-stale: must be longer than 0s"),
        (["--metrics-port", "99999"], "--metrics-port: Input should be less than or equal to"),
        (["--rounds-workers", "many"], "--rounds-workers: Input should be a valid integer"),
        (["--probe-resources", "{cpu: 4}"], "--probe-resources: not JSON"),
    ],
)
def test_a_bad_value_is_refused_in_one_line_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["operator", *argv]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert error.startswith(f"pitcrew operator: {message}")

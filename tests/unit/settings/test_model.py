"""The operator's settings: grouped, documented field by field, one default each."""

from __future__ import annotations

from pathlib import Path

import yaml

from pitcrew.api.meta import Duration
from pitcrew.api.settings import (
    LeaderSettings,
    OperatorSettings,
    RoundSettings,
    SettingsGroup,
    settings_fields,
)
from pitcrew.api.vocabulary import DEFAULT_NAMESPACE

ROOT = Path(__file__).resolve().parents[3]
CHANGED = OperatorSettings(
    namespace="ops",
    dry_run=True,
    leader=LeaderSettings(election=False, lease_duration=Duration("1m")),
    rounds=RoundSettings(resync=Duration("1h30m"), workers=4),
)


def test_every_setting_and_every_group_has_a_docstring() -> None:
    assert all(setting.description for setting in settings_fields())
    groups = SettingsGroup.__subclasses__()
    assert OperatorSettings in groups
    assert all(group.__doc__ for group in groups)
    assert all(info.description for info in OperatorSettings.model_fields.values())


def test_the_settings_round_trip_through_their_chart_form() -> None:
    dumped = CHANGED.model_dump(mode="json", by_alias=True)
    assert dumped["rounds"]["resync"] == "1h30m"
    assert dumped["leader"]["leaseDuration"] == "1m"
    assert OperatorSettings.model_validate(dumped) == CHANGED


def test_the_settings_round_trip_through_their_dotted_paths() -> None:
    values = {s.key: s.default for s in settings_fields()}
    assert OperatorSettings.from_values(values) == OperatorSettings()
    assert OperatorSettings.from_values({"rounds.resync": "1h30m"}).rounds == RoundSettings(
        resync=Duration("1h30m")
    )


def test_the_charts_values_are_the_models_defaults() -> None:
    values = yaml.safe_load((ROOT / "charts" / "pitcrew" / "values.yaml").read_text())
    assert OperatorSettings.model_validate(values["operator"]["settings"]) == OperatorSettings()


def test_flags_are_unique() -> None:
    names = [name for s in settings_fields() for name in (s.flag, *s.aliases)]
    assert len(names) == len(set(names))


def test_the_default_namespace_is_the_vocabularys() -> None:
    assert OperatorSettings().namespace == DEFAULT_NAMESPACE == "pitcrew-system"

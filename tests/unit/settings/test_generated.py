"""The chart's operator values and the configuration reference follow the model:
a changed default fails `pitcrew chart --check` and `pitcrew crds --check`."""

from __future__ import annotations

from pathlib import Path

import pytest

from pitcrew.api import docgen
from pitcrew.api.meta import Duration
from pitcrew.api.settings import RoundSettings, settings_fields
from pitcrew.cli.main import main
from pitcrew.deploy import chart, chart_settings

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "pitcrew"


@pytest.fixture
def changed_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model's resync default, changed and not regenerated."""
    monkeypatch.setattr(RoundSettings.model_fields["resync"], "default", Duration("45s"))


def test_the_committed_chart_and_reference_are_generated() -> None:
    assert chart.stale_files(CHART) == [], "run `pitcrew chart` and commit the result"
    assert (ROOT / docgen.FILE).read_text() == docgen.render(), "run `pitcrew crds`"


@pytest.mark.usefixtures("changed_default")
def test_a_changed_default_makes_the_chart_values_stale() -> None:
    assert chart.stale_files(CHART) == [CHART / "values.yaml"]
    assert "resync: 45s" in chart_settings.values_block()


@pytest.mark.usefixtures("changed_default")
def test_a_changed_default_fails_the_chart_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chart", "--check", "--out", str(CHART)]) == 1
    assert "values.yaml is stale; run `pitcrew chart`" in capsys.readouterr().err


@pytest.mark.usefixtures("changed_default")
def test_a_changed_default_fails_the_reference_check(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["crds", "--check"]) == 1
    assert "docs/configuration.md is stale" in capsys.readouterr().err


def test_the_deployment_passes_every_setting_but_the_kubeconfig() -> None:
    template = chart_settings.args_template()
    for setting in settings_fields():
        passed = f'"{setting.flag}=' in template or f"}}}}{setting.flag}{{{{" in template
        assert passed == (setting.key != "kubeconfig"), setting.key
    assert set(chart_settings.WIRED) < {s.key for s in settings_fields()}


def test_the_values_the_chart_sets_itself_are_documented() -> None:
    install = (ROOT / "docs" / "install.md").read_text()
    by_key = {s.key: s for s in settings_fields()}
    for key in chart_settings.WIRED:
        assert f"`{by_key[key].flag}`" in install, key


def test_values_without_the_markers_are_refused() -> None:
    with pytest.raises(Exception, match="markers"):
        chart_settings.splice_values("operator:\n  replicas: 2\n")

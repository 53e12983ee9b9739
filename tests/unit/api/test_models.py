"""The API models parse what the apiserver stores and reject what it would."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from pitcrew.api import crdgen
from pitcrew.api.meta import Duration
from pitcrew.api.policy import GPUHealthPolicy, GPUHealthPolicySpec, RemediationAction

SELECTOR = {"matchLabels": {"nvidia.com/gpu.present": "true"}}


def test_minimal_spec_gets_safe_defaults() -> None:
    spec = GPUHealthPolicySpec.model_validate({"nodeSelector": SELECTOR})
    assert spec.safety.max_concurrent_drains == 1
    assert spec.safety.dry_run is False
    assert [s.action for s in spec.remediation.ladders.fatal] == [
        RemediationAction.RESET_GPU,
        RemediationAction.REBOOT,
        RemediationAction.RETIRE,
    ]


def test_unknown_field_is_refused() -> None:
    with pytest.raises(ValidationError, match="maxUnhealty"):
        GPUHealthPolicySpec.model_validate({"nodeSelector": SELECTOR, "safety": {"maxUnhealty": 3}})


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("10m", 600), ("1h30m", 5400), ("250ms", 0.25), ("1.5h", 5400)],
)
def test_durations_parse_like_go(text: str, seconds: float) -> None:
    assert Duration(text) == datetime.timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "5 minutes", "10", "-1s", "1d"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        Duration(text)


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(["ms", "s", "m", "h"]))
def test_any_integer_duration_round_trips(amount: int, unit: str) -> None:
    factor = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    assert Duration(f"{amount}{unit}").total_seconds() == pytest.approx(amount * factor)


def test_a_policy_duration_is_parsed_once_and_written_back_as_the_user_wrote_it() -> None:
    spec = GPUHealthPolicySpec.model_validate(
        {"nodeSelector": SELECTOR, "safety": {"drain": {"timeout": "1h30m"}}}
    )
    timeout = spec.safety.drain.timeout
    assert isinstance(timeout, Duration)
    assert timeout == datetime.timedelta(minutes=90)
    assert spec.model_dump(by_alias=True, mode="json")["safety"]["drain"]["timeout"] == "1h30m"
    assert spec.model_dump(by_alias=True)["safety"]["drain"]["timeout"] == "1h30m"


def test_a_malformed_duration_in_a_policy_is_refused_with_its_field() -> None:
    with pytest.raises(ValidationError, match=r"safety\.drain\.timeout[\s\S]*invalid duration"):
        GPUHealthPolicySpec.model_validate(
            {"nodeSelector": SELECTOR, "safety": {"drain": {"timeout": "ten minutes"}}}
        )


def test_a_naive_timestamp_is_refused() -> None:
    from pitcrew.api.gpunode import GPUNodeStatus  # noqa: PLC0415

    with pytest.raises(ValidationError, match="timezone"):
        GPUNodeStatus.model_validate({"phaseSince": "2026-12-01T12:00:00"})
    aware = GPUNodeStatus.model_validate({"phaseSince": "2026-12-01T12:00:00Z"})
    assert aware.phase_since is not None
    assert aware.phase_since.utcoffset() == datetime.timedelta(0)


def test_periodic_verification_defaults_and_its_shortest_interval() -> None:
    periodic = GPUHealthPolicySpec.model_validate({"nodeSelector": SELECTOR}).validation.periodic
    assert (periodic.enabled, str(periodic.interval), periodic.max_concurrent) == (
        False,
        "1h",
        "5%",
    )
    assert str(periodic.suite) == "quick"
    with pytest.raises(ValidationError, match="at least 5m"):
        GPUHealthPolicySpec.model_validate(
            {
                "nodeSelector": SELECTOR,
                "validation": {"periodic": {"interval": "4m59s"}},
            }
        )


def test_stragglers_are_taken_out_by_default_after_three_reports_twenty_percent_slow() -> None:
    stragglers = GPUHealthPolicySpec.model_validate({"nodeSelector": SELECTOR}).stragglers
    assert (
        stragglers.enabled,
        stragglers.slower_than_median_percent,
        stragglers.consecutive_reports,
    ) == (True, 20, 3)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (
            {"consecutiveReports": 1},
            r"stragglers\.consecutiveReports\n.*greater than or equal to 2",
        ),
        (
            {"consecutiveReports": 101},
            r"stragglers\.consecutiveReports\n.*less than or equal to 100",
        ),
        (
            {"slowerThanMedianPercent": 2},
            r"stragglers\.slowerThanMedianPercent\n.*greater than or equal to 5",
        ),
        (
            {"slowerThanMedianPercent": 1001},
            r"stragglers\.slowerThanMedianPercent\n.*less than or equal to 1000",
        ),
        ({"enable": False}, r"stragglers\.enable\n"),
    ],
)
def test_a_straggler_setting_out_of_range_is_refused_with_its_field(
    setting: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        GPUHealthPolicySpec.model_validate({"nodeSelector": SELECTOR, "stragglers": setting})


def test_the_crd_refuses_the_same_straggler_settings() -> None:
    """The apiserver, not only the operator, refuses one report or a 2 % threshold."""
    schema = crdgen.openapi_schema(GPUHealthPolicy)
    fields = schema["properties"]["spec"]["properties"]["stragglers"]["properties"]
    assert (fields["consecutiveReports"]["minimum"], fields["consecutiveReports"]["maximum"]) == (
        2,
        100,
    )
    percent = fields["slowerThanMedianPercent"]
    assert (percent["minimum"], percent["maximum"]) == (5, 1000)

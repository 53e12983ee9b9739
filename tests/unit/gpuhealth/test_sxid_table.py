"""The SXid table follows the "NVSwitch SXid errors" appendix of NVIDIA's Fabric
Manager user guide (DU-09883-001): non-fatal, fatal and always-fatal lists;
the line's own verdict is weighed against it."""

from __future__ import annotations

import pytest

from gpuhealth.report import FaultClass, RecommendedAction
from gpuhealth.sxid import SXID_TABLE, classify

NON_FATAL = [11012, 11021, 11022, 11023, 12021, 12023, 15008, 15011, 19049, 19055, 19057]
NON_FATAL += [19059, 19062, 19065, 19068, 19071, 24001, 24002, 24003, 20001, 22013, 20012]
STALLS = [11004, 12028, 19084]
FATAL = [11001, 11009, 11013, 11018, 11019, 11020, 12001, 12002, 12022, 12024, 12025, 12026]
FATAL += [12027, 12030, 12031, 12032, 14017, 15001, 15006, 15009, 15010, 15012, 15013]
FATAL += [19047, 19048, 19054, 19056, 19058, 19060, 19061, 19063, 19064, 19066, 19067]
FATAL += [19069, 19070, 20034, 22012, 24004, 24005, 24006, 24007]
ALWAYS_FATAL = [12020, 22003, 22011, *range(23001, 23018)]


def test_every_sxid_of_the_guide_has_a_row() -> None:
    assert sorted(set(NON_FATAL + STALLS + FATAL + ALWAYS_FATAL) - set(SXID_TABLE)) == []


@pytest.mark.parametrize("code", NON_FATAL)
def test_non_fatal_sxids_are_watched(code: int) -> None:
    assert (classify(code).fault_class, classify(code).action) == (
        FaultClass.WATCH,
        RecommendedAction.NONE,
    )


@pytest.mark.parametrize("code", STALLS)
def test_sxids_that_stall_nvlink_traffic_degrade_until_a_reboot(code: int) -> None:
    assert (classify(code).fault_class, classify(code).action) == (
        FaultClass.DEGRADED,
        RecommendedAction.REBOOT,
    )


@pytest.mark.parametrize("code", FATAL + ALWAYS_FATAL)
def test_fatal_sxids_take_the_node_out(code: int) -> None:
    rule = classify(code)
    assert rule.fatal
    assert rule.action is RecommendedAction.REBOOT


@pytest.mark.parametrize("code", ALWAYS_FATAL)
def test_always_fatal_sxids_stay_fatal_whatever_the_line_says(code: int) -> None:
    assert classify(code, "non-fatal").fatal


def test_a_line_that_says_fatal_is_fatal_even_for_a_watched_code() -> None:
    assert classify(20001, "fatal").fatal
    assert classify(99999, "fatal").fatal


def test_a_contained_occurrence_of_a_fatal_code_is_watched() -> None:
    rule = classify(11001, "non-fatal")
    assert rule.fault_class is FaultClass.WATCH
    assert "contained" in rule.description


def test_a_non_fatal_line_keeps_a_stalling_row() -> None:
    assert classify(12028, "non-fatal").fault_class is FaultClass.DEGRADED


def test_unknown_sxid_is_only_watched() -> None:
    assert (classify(99999).fault_class, classify(99999).action) == (
        FaultClass.WATCH,
        RecommendedAction.NONE,
    )

"""The XID table covers what fleets act on and classifies each code as documented."""

from __future__ import annotations

import pytest

from gpuhealth.report import FaultClass, RecommendedAction
from gpuhealth.xid import XID_TABLE, classify

REQUIRED = [
    13,
    31,
    43,
    45,
    48,
    61,
    62,
    63,
    64,
    68,
    69,
    74,
    79,
    92,
    94,
    95,
    109,
    119,
    120,
    140,
    143,
    *range(144, 151),
    154,
]


def test_every_required_xid_has_a_row() -> None:
    assert sorted(set(REQUIRED) - set(XID_TABLE)) == []


@pytest.mark.parametrize(
    ("code", "fault_class"),
    [
        (79, FaultClass.FATAL),
        (48, FaultClass.FATAL),
        (95, FaultClass.FATAL),
        (74, FaultClass.FATAL),
        (119, FaultClass.FATAL),
        (120, FaultClass.FATAL),
        (94, FaultClass.DEGRADED),
        (13, FaultClass.APPLICATION),
        (31, FaultClass.APPLICATION),
        (43, FaultClass.APPLICATION),
        (45, FaultClass.APPLICATION),
        (63, FaultClass.WATCH),
        (92, FaultClass.WATCH),
    ],
)
def test_classes_follow_the_design(code: int, fault_class: FaultClass) -> None:
    assert classify(code).fault_class is fault_class


def test_unknown_xid_is_only_watched() -> None:
    assert classify(999).fault_class is FaultClass.WATCH
    assert classify(999).action is RecommendedAction.NONE


@pytest.mark.parametrize(
    ("message", "action"),
    [
        (
            "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
            RecommendedAction.RESET_GPU,
        ),
        (
            "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
            RecommendedAction.REBOOT,
        ),
        (
            "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x4 (Drain and Reset)",
            RecommendedAction.RESET_GPU,
        ),
    ],
)
def test_xid_154_follows_the_drivers_verdict(message: str, action: RecommendedAction) -> None:
    assert classify(154, message).action is action

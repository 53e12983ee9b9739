"""The XID table: what each NVIDIA driver XID means for a node.

One row per XID (after NVIDIA's XID catalog and the way large fleets act on
them): a fault class, a recommended action and a short description. Rules of
thumb encoded here:

- application XIDs (13, 31, 43, 45, 68, 69, 109) are usually a bug or bad
  input in the job: they are counted, never acted on alone; repeats on one GPU
  within a window escalate to ``degraded`` (see :mod:`gpuhealth.checks.xid`);
- memory XIDs split by containment: 63 records a remap (watch), 94 is a
  contained ECC error (degraded: reset at the next opportunity), 48/95/140 are
  uncontained (fatal);
- 79 (fallen off the bus), 119/120 (GSP) and 143 need at least a reset and
  often a reboot;
- 154 carries the driver's own recovery verdict in its message, which
  overrides the row (see :func:`classify`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuhealth.report import FaultClass, RecommendedAction

F, D, A, W = FaultClass.FATAL, FaultClass.DEGRADED, FaultClass.APPLICATION, FaultClass.WATCH
NONE, RESTART = RecommendedAction.NONE, RecommendedAction.RESTART_JOB
RESET, REBOOT, REPLACE = (
    RecommendedAction.RESET_GPU,
    RecommendedAction.REBOOT,
    RecommendedAction.REPLACE,
)


@dataclass(frozen=True)
class XidRule:
    fault_class: FaultClass
    action: RecommendedAction
    description: str


# fmt: off
XID_TABLE: dict[int, XidRule] = {
    13: XidRule(A, RESTART, "graphics engine exception"),
    31: XidRule(A, RESTART, "GPU memory page fault"),
    43: XidRule(A, RESTART, "GPU stopped processing (channel reset)"),
    45: XidRule(A, RESTART, "preemptive cleanup after earlier errors"),
    48: XidRule(F, RESET, "double-bit ECC error"),
    61: XidRule(D, RESET, "internal micro-controller breakpoint/warning"),
    62: XidRule(F, RESET, "internal micro-controller halt"),
    63: XidRule(W, NONE, "ECC page retirement or row remap recorded"),
    64: XidRule(F, REPLACE, "ECC page retirement or row remap recording failed"),
    68: XidRule(A, RESTART, "video processor exception"),
    69: XidRule(A, RESTART, "graphics engine class error"),
    74: XidRule(F, RESET, "NVLink error"),
    79: XidRule(F, REBOOT, "GPU has fallen off the bus"),
    92: XidRule(W, NONE, "high single-bit ECC error rate"),
    94: XidRule(D, RESET, "contained ECC error (reset to remap)"),
    95: XidRule(F, RESET, "uncontained ECC error"),
    109: XidRule(A, RESTART, "context switch timeout"),
    119: XidRule(F, REBOOT, "GSP RPC timeout"),
    120: XidRule(F, REBOOT, "GSP error"),
    140: XidRule(F, RESET, "unrecovered ECC error"),
    143: XidRule(F, REBOOT, "GPU initialisation failure"),
    144: XidRule(D, RESET, "NVLink: NETIR link event"),
    145: XidRule(D, RESET, "NVLink: RLW error"),
    146: XidRule(D, RESET, "NVLink: TLW error"),
    147: XidRule(D, RESET, "NVLink: TREX error"),
    148: XidRule(D, RESET, "NVLink: power state error"),
    149: XidRule(F, RESET, "NVLink: NETIR error (link down)"),
    150: XidRule(D, RESET, "NVLink: MSE watchdog"),
    154: XidRule(D, RESET, "GPU recovery action changed"),
}
# fmt: on

UNKNOWN = XidRule(W, NONE, "unknown XID; see NVIDIA's XID catalog")

# XID 154: "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
_RECOVERY = re.compile(r"to 0x[0-9a-fA-F]+ \(([^)]*)\)")
_RECOVERY_ACTIONS: dict[str, XidRule] = {
    "none": XidRule(W, NONE, "GPU recovery action cleared"),
    "gpu reset required": XidRule(F, RESET, "driver requires a GPU reset"),
    "node reboot required": XidRule(F, REBOOT, "driver requires a node reboot"),
    "drain p2p": XidRule(D, NONE, "driver asks to drain peer-to-peer traffic"),
    "drain and reset": XidRule(D, RESET, "driver asks to drain, then reset the GPU"),
}


def classify(code: int, message: str = "") -> XidRule:
    """The rule for one XID event; for 154 the driver's verdict in the message wins."""
    if code == 154:
        match = _RECOVERY.search(message)
        if match and match.group(1).strip().lower() in _RECOVERY_ACTIONS:
            return _RECOVERY_ACTIONS[match.group(1).strip().lower()]
    return XID_TABLE.get(code, UNKNOWN)

"""The SXid table: what each NVSwitch error means for a node.

The nvswitch driver logs switch errors as SXids
(``nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 ...``);
they are about the NVLink fabric of the baseboard, never about one GPU, so
they are switch events of their own and never an XID. The rows follow the
"NVSwitch SXid errors" appendix of NVIDIA's Fabric Manager user guide
(DU-09883-001): non-fatal errors (corrected ECC, link replays) are watched;
errors that stall a GPU's NVLink traffic until a reset (12028, 11004, 19084)
degrade the node; fatal and always-fatal errors take it out, because the
guide's recovery for both is a reset of the GPUs and NVSwitches, which on a
bare-metal node is a reboot. A few codes the guide does not list come from
the driver's own error enumeration (``ctrl_dev_nvswitch.h``: thermal
shutdown, I/O failure, firmware initialisation failure).

The line itself often says what the driver decided: ``Fatal``, ``Non-fatal``
or ``Correctable`` (``NVSWITCH_REPORT_FATAL``/``_NONFATAL``/``_CORRECTABLE``),
or ``Severity 1``/``Severity 0`` on the record that follows. Many SXids are
fatal or not depending on whether the hardware contained them, so the line's
verdict wins over the table (see :func:`classify`), except for the codes the
guide calls always fatal.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuhealth.report import FaultClass, RecommendedAction

F, D, W = FaultClass.FATAL, FaultClass.DEGRADED, FaultClass.WATCH
NONE, REBOOT = RecommendedAction.NONE, RecommendedAction.REBOOT

FATAL, NON_FATAL, CORRECTABLE = "fatal", "non-fatal", "correctable"
SEVERITIES = (FATAL, NON_FATAL, CORRECTABLE)
"""What a line can say of itself; "" when it says nothing."""


@dataclass(frozen=True)
class SxidRule:
    fault_class: FaultClass
    action: RecommendedAction
    description: str
    always_fatal: bool = False
    """Fatal to the whole fabric whatever the line says (the guide's "always fatal")."""

    @property
    def fatal(self) -> bool:
        return self.fault_class is FaultClass.FATAL


CORRECTED_ECC = SxidRule(W, NONE, "single-bit ECC error, corrected by the switch")


def _always(description: str) -> SxidRule:
    return SxidRule(F, REBOOT, description, always_fatal=True)


# fmt: off
SXID_TABLE: dict[int, SxidRule] = {
    # non-fatal: the switch corrected or retried it
    **dict.fromkeys(
        (11012, 11021, 11022, 11023, 12021, 12023, 15008, 15011, 19049, 19055, 19057,
         19059, 19062, 19065, 19068, 19071, 24001, 24002, 24003),
        CORRECTED_ECC,
    ),
    10001: SxidRule(W, NONE, "host PRI error; may precede fatal errors"),
    10002: SxidRule(W, NONE, "host PRI timeout; may precede fatal errors"),
    10004: SxidRule(W, NONE, "thermal event started: links may drop to single-lane mode"),
    10005: SxidRule(W, NONE, "thermal event ended"),
    20001: SxidRule(W, NONE, "TX replay: the link retransmitted a packet"),
    20009: SxidRule(W, NONE, "RX short error rate"),
    20012: SxidRule(W, NONE, "broken or inconsistent connection, or an uncoordinated shutdown"),
    22013: SxidRule(W, NONE, "MINION link DLREQ interrupt (harmless)"),
    # non-fatal to the fabric, but the GPU's NVLink traffic stalls until a reset
    11004: SxidRule(D, REBOOT, "ingress invalid ACL: NVLink traffic stalls (partition config)"),
    12028: SxidRule(D, REBOOT, "egress non-posted PRIV error: NVLink traffic stalls, XID 45"),
    19084: SxidRule(D, REBOOT, "AN1 heartbeat timeout; usually with a fatal SXid"),
    # fatal: the port must be reset (reboot); repeats mean the switch needs repair
    11001: SxidRule(F, REBOOT, "ingress invalid command"),
    11009: SxidRule(F, REBOOT, "ingress invalid VCSet"),
    11013: SxidRule(F, REBOOT, "ingress header double-bit ECC error"),
    11018: SxidRule(F, REBOOT, "ingress RID double-bit ECC error"),
    11019: SxidRule(F, REBOOT, "ingress RLAN double-bit ECC error"),
    11020: SxidRule(F, REBOOT, "ingress control parity error"),
    12001: SxidRule(F, REBOOT, "egress crossbar overflow"),
    12002: SxidRule(F, REBOOT, "egress packet route error"),
    12022: SxidRule(F, REBOOT, "egress input double-bit ECC error"),
    12024: SxidRule(F, REBOOT, "egress output double-bit ECC error"),
    12025: SxidRule(F, REBOOT, "egress credit overflow"),
    12026: SxidRule(F, REBOOT, "egress destination request ID error"),
    12027: SxidRule(F, REBOOT, "egress destination response ID error"),
    12030: SxidRule(F, REBOOT, "egress control parity error"),
    12031: SxidRule(F, REBOOT, "egress credit parity error"),
    12032: SxidRule(F, REBOOT, "egress flit type mismatch"),
    14017: SxidRule(F, REBOOT, "TS ATO timeout"),
    15001: SxidRule(F, REBOOT, "route buffer over/underflow"),
    15006: SxidRule(F, REBOOT, "route transdone over/underflow"),
    15009: SxidRule(F, REBOOT, "route GLT double-bit ECC error"),
    15010: SxidRule(F, REBOOT, "route parity error"),
    15012: SxidRule(F, REBOOT, "route incoming double-bit ECC error"),
    15013: SxidRule(F, REBOOT, "route credit parity error"),
    19047: SxidRule(F, REBOOT, "NCISOC header double-bit ECC error"),
    19048: SxidRule(F, REBOOT, "NCISOC data double-bit ECC error"),
    19054: SxidRule(F, REBOOT, "header RAM double-bit ECC error"),
    19056: SxidRule(F, REBOOT, "DAT0 RAM double-bit ECC error"),
    19058: SxidRule(F, REBOOT, "DAT1 RAM double-bit ECC error"),
    19060: SxidRule(F, REBOOT, "CREQ RAM header double-bit ECC error"),
    19061: SxidRule(F, REBOOT, "CREQ RAM data double-bit ECC error"),
    19063: SxidRule(F, REBOOT, "response RAM header double-bit ECC error"),
    19064: SxidRule(F, REBOOT, "response RAM data double-bit ECC error"),
    19066: SxidRule(F, REBOOT, "COM RAM header double-bit ECC error"),
    19067: SxidRule(F, REBOOT, "COM RAM data double-bit ECC error"),
    19069: SxidRule(F, REBOOT, "RSP1 RAM header double-bit ECC error"),
    19070: SxidRule(F, REBOOT, "RSP1 RAM data double-bit ECC error"),
    20034: SxidRule(F, REBOOT, "LTSSM fault: the link went down from active"),
    22012: SxidRule(F, REBOOT, "MINION link NA interrupt"),
    24004: SxidRule(F, REBOOT, "sourcetrack TCEN0 crumbstore double-bit ECC error"),
    24005: SxidRule(F, REBOOT, "sourcetrack TCEN0 TD crumbstore double-bit ECC error"),
    24006: SxidRule(F, REBOOT, "sourcetrack TCEN1 crumbstore double-bit ECC error"),
    24007: SxidRule(F, REBOOT, "sourcetrack timeout"),
    # always fatal to the whole fabric: restart the host
    10003: _always("unhandled interrupt"),
    10006: _always("thermal shutdown"),
    10007: _always("I/O failure: the switch does not answer"),
    10008: _always("firmware initialisation failure"),
    12020: _always("egress sequence ID error"),
    22003: _always("MINION halt"),
    22011: _always("MINION external error"),
    23001: _always("ingress SRC-VC buffer overflow"),
    23002: _always("ingress SRC-VC buffer underflow"),
    23003: _always("egress DST-VC credit overflow"),
    23004: _always("egress DST-VC credit underflow"),
    23005: _always("ingress packet burst error"),
    23006: _always("ingress packet sticky error"),
    23007: _always("possible bubbles at ingress"),
    23008: _always("ingress packet with an invalid destination"),
    23009: _always("ingress packet parity error"),
    23010: _always("tile-out ingress SRC-VC buffer overflow"),
    23011: _always("tile-out ingress SRC-VC buffer underflow"),
    23012: _always("tile-out egress DST-VC credit overflow"),
    23013: _always("tile-out egress DST-VC credit underflow"),
    23014: _always("tile-out ingress packet burst error"),
    23015: _always("tile-out ingress packet sticky error"),
    23016: _always("tile-out possible bubbles at ingress"),
    23017: _always("tile-out ingress credit parity error"),
}
# fmt: on

UNKNOWN = SxidRule(W, NONE, "unknown SXid; see NVIDIA's Fabric Manager user guide")


def classify(code: int, severity: str = "") -> SxidRule:
    """The rule for one SXid, given what its line said of itself (:data:`SEVERITIES`).

    Always-fatal codes are fatal whatever the line says. Otherwise a line
    that says ``Fatal`` is fatal; one that says ``Non-fatal`` or
    ``Correctable`` keeps the table's row if that row is not fatal, and is
    watched if the table would call the code fatal (the hardware contained
    it this time). A line that says nothing takes the table's row.
    """
    rule = SXID_TABLE.get(code)
    description = rule.description if rule else UNKNOWN.description
    if rule is not None and rule.always_fatal:
        return rule
    if severity == FATAL:
        return SxidRule(F, REBOOT, description)
    if severity in (NON_FATAL, CORRECTABLE):
        if rule is not None and not rule.fatal:
            return rule
        return SxidRule(W, NONE, f"{description} (contained: logged {severity})")
    return rule or UNKNOWN

"""Kernel log lines: the GPU driver's XIDs and the NVSwitch driver's SXids.

The formats are the drivers' own (NVIDIA/open-gpu-kernel-modules):

- ``krcReportXid`` (``kernel_rc.c``) prints
  ``NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s``, with
  `` GPU-I:%02u`` and `` GPU-CI:%02u`` inside the parenthesis when MIG
  attributes the error, and ``pid='<unknown>', name=<unknown>`` when no
  process owns the channel; error containment prints ``pid=`` without
  ``name=``, and old drivers print neither, nor the ``PCI:`` tag;
- ``NVSWITCH_PRINT_SXID`` (``common_nvswitch.h``) prints
  ``nvidia-%s: SXid (PCI:%04x:%02x:%02x.%x): %05d, <text>``, where the text
  of an interrupt starts ``Fatal, Link %02d``, ``Non-fatal, Link %02d`` or
  ``Correctable, Link %02d``, and the record that follows repeats the code
  with ``Severity %d Engine instance ...`` and ``Data {...}``.

Each line is found by a substring anywhere in it, so every prefix style
reads the same: ``/dev/kmsg`` records (``6,1834,8123553311,-;``), ``dmesg``
with or without timestamps (``[ 8123.553311]``, ``-T``'s
``[Fri Aug 30 11:43:09 2024]``, ``-x``'s ``kern  :err   :``), journald
and syslog (``Dec 02 13:01:12 host kernel:``) and a bare ``kernel:``.
Unrelated lines cost one substring test, which keeps a 10 MB log well under
a second.

An NVRM Xid or SXid line the parser cannot read is *flagged* with its line
number and text, and the rest of the log is still read: one line of a
format the parser does not know must never hide the fatal XID two lines
below it. Whoever reads the result decides what a partial read means (the
CLI exits 3, the node agent reports a ``kernel-log`` warning).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpuhealth.parsers.errors import ParseError
from gpuhealth.samples import SxidEvent, XidEvent
from gpuhealth.sxid import FATAL, NON_FATAL

MARKER = "NVRM: Xid"
SXID_MARKER = "SXid ("

_BUS = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}"
_XID = re.compile(
    rf"NVRM: Xid \((?:PCI:)?(?P<bus>{_BUS}(?:\.[0-7])?)"
    r"(?:\s+GPU-I:(?P<gi>\d+))?(?:\s+GPU-CI:(?P<ci>\d+))?\):"
    r"\s*(?P<code>\d+)(?:,\s*(?P<rest>.*))?$"
)
_PROCESS = re.compile(
    r"^(?:pid=(?P<pid>'<unknown>'|<unknown>|\d+)(?:,\s*|$))?"
    r"(?:name=(?P<name>[^,]*?)(?:,\s*|$))?(?P<message>.*)$"
)
_SXID = re.compile(
    rf"(?:nvidia-(?P<switch>nvswitch\d+):\s*)?SXid \((?:PCI:)?(?P<bus>{_BUS}(?:\.[0-7])?)\):"
    r"\s*(?P<code>\d+)(?:,\s*(?P<body>.*))?$"
)
_VERDICT = re.compile(
    r"^(?P<severity>Fatal|Non-fatal|Correctable),\s*(?:Link\s+(?P<link>\d+)\b\s*)?(?P<text>.*)$",
    re.IGNORECASE,
)
_SEVERITY_RECORD = re.compile(r"^Severity\s+(?P<severity>\d+)\s+Engine instance\s+(?P<link>\d+)")
_DATA_RECORD = re.compile(r"^Data\s*\{")
_UNKNOWN = ("'<unknown>'", "<unknown>")

# NVSWITCH_ERROR_SEVERITY_TYPE (ctrl_dev_nvswitch.h): 0 non-fatal, 1 fatal
_SEVERITY_NUMBER = {0: NON_FATAL, 1: FATAL}


@dataclass(frozen=True)
class FlaggedLine:
    """A driver line the parser could not read: its events are unknown."""

    line: int
    """1-based line number in what was read (for a reader that follows a log,
    counted from where it started reading)."""
    text: str
    reason: str


@dataclass(frozen=True)
class KernelLogResult:
    xids: tuple[XidEvent, ...] = ()
    sxids: tuple[SxidEvent, ...] = ()
    """NVSwitch errors; never counted as GPU XIDs."""
    flagged: tuple[FlaggedLine, ...] = ()

    @property
    def partial(self) -> bool:
        """True when some driver lines could not be read."""
        return bool(self.flagged)


def normalize_bus_id(bus_id: str) -> str:
    """``00000000:18:00.0`` (NVML) and ``0000:18:00`` (kernel) -> ``0000:18:00``."""
    parts = bus_id.lower().split(":")
    if len(parts) != 3:
        return bus_id.lower()
    domain, bus, device = parts
    return f"{int(domain, 16):04x}:{bus}:{device.split('.')[0]}"


def _optional_int(text: str | None) -> int | None:
    return None if text is None else int(text)


class _UnreadableError(Exception):
    """A driver line whose format the parser does not know; the text says which driver."""


def _xid(line: str) -> XidEvent:
    match = _XID.search(line)
    if not match:
        raise _UnreadableError("unreadable NVRM Xid line")
    process = _PROCESS.match(match["rest"] or "")
    assert process is not None  # every group is optional
    pid, name = process["pid"], process["name"]
    return XidEvent(
        code=int(match["code"]),
        gpu=None,
        pci_bus_id=normalize_bus_id(match["bus"]),
        message=process["message"].strip(),
        gpu_instance=_optional_int(match["gi"]),
        compute_instance=_optional_int(match["ci"]),
        pid=None if pid is None or pid in _UNKNOWN else int(pid),
        process=None if name is None or name.strip() in _UNKNOWN else name.strip(),
    )


@dataclass(frozen=True)
class _SeverityRecord:
    """The ``Severity %d Engine instance`` record that follows an SXid's summary."""

    event: SxidEvent


def _sxid(line: str) -> SxidEvent | _SeverityRecord | None:
    """The SXid summary on a line, its ``Severity`` record, or ``None`` for its
    ``Data`` record (raw registers, no verdict)."""
    match = _SXID.search(line)
    if not match:
        raise _UnreadableError("unreadable NVSwitch SXid line")
    body = (match["body"] or "").strip()
    event = SxidEvent(
        code=int(match["code"]), switch=match["switch"] or "", pci_bus_id=match["bus"].lower()
    )
    if verdict := _VERDICT.match(body):
        return dataclasses.replace(
            event,
            severity=verdict["severity"].lower(),
            link=_optional_int(verdict["link"]),
            message=verdict["text"].strip(),
        )
    if record := _SEVERITY_RECORD.match(body):
        severity = _SEVERITY_NUMBER.get(int(record["severity"]), "")
        return _SeverityRecord(dataclasses.replace(event, severity=severity))
    if _DATA_RECORD.match(body):
        return None
    return dataclasses.replace(event, message=body)


def _read(line: str) -> XidEvent | SxidEvent | _SeverityRecord | None:
    text = line.rstrip("\n")
    if MARKER in text:
        return _xid(text)
    if SXID_MARKER in text:
        return _sxid(text)
    return None


def parse_line(
    line: str, *, number: int | None = None, source: str = "kmsg"
) -> XidEvent | SxidEvent | None:
    """The event on one line: ``None`` for an unrelated line and for an SXid's
    follow-up records (:class:`Parser` folds those into their SXid); a driver
    line it cannot read raises :class:`ParseError` naming the line."""
    try:
        event = _read(line)
    except _UnreadableError as error:
        raise ParseError(f"{error}: {line.strip()[:200]!r}", source=source, line=number) from None
    return None if isinstance(event, _SeverityRecord) else event


class Parser:
    """Reads a kernel log line by line and hands out what it found.

    It keeps the state an SXid's follow-up record needs: the ``Severity``
    record of an interrupt carries the driver's verdict (1 fatal, 0 not) on
    the summary printed just before it, so it completes that SXid instead of
    being an event of its own; with no summary before it (the log starts
    there), or one already handed out without a verdict, it becomes an SXid
    with that verdict. A follower of a log feeds one :class:`Parser` for its
    lifetime and calls :meth:`take` after every read.
    """

    def __init__(self, *, source: str = "kmsg") -> None:
        self.source = source
        self.lines = 0
        self._xids: list[XidEvent] = []
        self._sxids: list[SxidEvent] = []
        self._flagged: list[FlaggedLine] = []
        self._last: dict[tuple[str, str, int], SxidEvent] = {}
        """The latest summary per switch and code, handed out or not."""

    def feed(self, line: str) -> None:
        self.lines += 1
        try:
            event = _read(line)
        except _UnreadableError as error:
            self._flagged.append(FlaggedLine(self.lines, line.strip()[:512], str(error)))
            return
        if isinstance(event, XidEvent):
            self._xids.append(event)
        elif isinstance(event, SxidEvent):
            self._sxids.append(event)
            self._last[(event.switch, event.pci_bus_id, event.code)] = event
        elif isinstance(event, _SeverityRecord):
            self._severity(event.event)

    def _severity(self, record: SxidEvent) -> None:
        key = (record.switch, record.pci_bus_id, record.code)
        summary = self._last.get(key)
        if summary is not None and summary.severity:
            return  # the summary said it already
        if summary is not None and summary in self._sxids:
            self._sxids[self._sxids.index(summary)] = self._last[key] = dataclasses.replace(
                summary, severity=record.severity
            )
            return
        orphan = dataclasses.replace(record, message="(severity record only)")
        self._sxids.append(orphan)
        self._last[key] = orphan

    def take(self) -> KernelLogResult:
        """What was found since the last :meth:`take`."""
        found = KernelLogResult(tuple(self._xids), tuple(self._sxids), tuple(self._flagged))
        self._xids, self._sxids, self._flagged = [], [], []
        return found


def parse_lines(lines: Iterable[str], *, source: str = "kmsg") -> KernelLogResult:
    """Every XID, SXid and flagged line of a whole log; an empty log is refused."""
    parser = Parser(source=source)
    seen_any = False
    for line in lines:
        seen_any = seen_any or bool(line.strip())
        parser.feed(line)
    if not seen_any:
        raise ParseError("empty kernel log", source=source)
    return parser.take()


def parse_text(text: str, *, source: str = "kmsg") -> KernelLogResult:
    return parse_lines(text.splitlines(), source=source)

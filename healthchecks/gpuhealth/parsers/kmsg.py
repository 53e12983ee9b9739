"""Kernel log lines: ``NVRM: Xid (PCI:0000:18:00): 79, pid=..., GPU has fallen off the bus.``

Accepts the three forms the line takes in practice: ``/dev/kmsg`` records
(``3,1234,5678,-;NVRM: ...``), ``dmesg`` (``[ 1234.5678] NVRM: ...``) and
journald/syslog (``Dec 02 13:00:00 host kernel: NVRM: ...``). Only NVRM Xid
lines matter; every other line is skipped cheaply (a substring test before
any regular expression), which keeps a 10 MB log well under a second.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpuhealth.parsers.errors import ParseError
from gpuhealth.samples import XidEvent

MARKER = "NVRM: Xid"
_XID = re.compile(
    r"NVRM: Xid \(PCI:(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\):"
    r" (?P<code>\d+),\s*(?P<message>.*)$"
)


def normalize_bus_id(bus_id: str) -> str:
    """``00000000:18:00.0`` (NVML) and ``0000:18:00`` (kernel) -> ``0000:18:00``."""
    parts = bus_id.lower().split(":")
    if len(parts) != 3:
        return bus_id.lower()
    domain, bus, device = parts
    return f"{int(domain, 16):04x}:{bus}:{device.split('.')[0]}"


def parse_line(line: str, *, number: int | None = None, source: str = "kmsg") -> XidEvent | None:
    """The XID event on one line, ``None`` for an unrelated line."""
    if MARKER not in line:
        return None
    match = _XID.search(line.rstrip("\n"))
    if not match:
        raise ParseError(
            f"unreadable NVRM Xid line: {line.strip()[:200]!r}", source=source, line=number
        )
    return XidEvent(
        code=int(match["code"]),
        gpu=None,
        pci_bus_id=normalize_bus_id(match["bus"]),
        message=match["message"].strip(),
    )


def parse_lines(lines: Iterable[str], *, source: str = "kmsg") -> list[XidEvent]:
    events = []
    seen_any = False
    for number, line in enumerate(lines, start=1):
        seen_any = seen_any or bool(line.strip())
        event = parse_line(line, number=number, source=source)
        if event is not None:
            events.append(event)
    if not seen_any:
        raise ParseError("empty kernel log", source=source)
    return events


def parse_text(text: str, *, source: str = "kmsg") -> list[XidEvent]:
    return parse_lines(text.splitlines(), source=source)

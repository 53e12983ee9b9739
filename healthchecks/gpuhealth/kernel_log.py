"""Follow the kernel log for NVRM Xid lines, from /dev/kmsg or a file.

``/dev/kmsg`` returns one record per read and ``EAGAIN`` when drained. The
reader starts at the end (``SEEK_END``) unless ``from_start`` is set, so a
restarted agent does not report old XIDs again. A plain file (a saved log,
or tests) is followed by offset, whole lines only. Unreadable input is
reported, not raised: XID detection being blind is a finding of its own.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from gpuhealth.parsers import ParseError
from gpuhealth.parsers.kmsg import parse_line
from gpuhealth.samples import XidEvent

KMSG = Path("/dev/kmsg")
RECORD_BYTES = 8192


class KernelLog:
    def __init__(self, path: Path = KMSG, *, from_start: bool = False) -> None:
        self.path = path
        self.error: str | None = None
        self._fd: int | None = None
        self._offset = 0
        self._is_kmsg = path == KMSG or path.is_char_device()
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            if not from_start:
                self._offset = os.lseek(self._fd, 0, os.SEEK_END)
        except OSError as error:
            self.error = f"cannot read {path}: {error.strerror}"

    def _lines(self) -> list[str]:
        assert self._fd is not None
        if self._is_kmsg:
            lines: list[str] = []
            while True:
                try:
                    record = os.read(self._fd, RECORD_BYTES)
                except BlockingIOError:
                    return lines
                except OSError as error:
                    if error.errno == errno.EPIPE:  # overwritten records: keep going
                        continue
                    raise
                if not record:
                    return lines
                lines.append(record.decode(errors="replace"))
        os.lseek(self._fd, self._offset, os.SEEK_SET)
        chunks = []
        while chunk := os.read(self._fd, 1 << 20):
            chunks.append(chunk)
        data = b"".join(chunks)
        complete = data.rfind(b"\n") + 1
        self._offset += complete
        return data[:complete].decode(errors="replace").splitlines()

    def read_new(self) -> list[XidEvent]:
        if self._fd is None:
            return []
        events = []
        try:
            for line in self._lines():
                try:
                    event = parse_line(line, source=str(self.path))
                except ParseError as error:
                    self.error = str(error)
                    continue
                if event is not None:
                    events.append(event)
        except OSError as error:
            self.error = f"cannot read {self.path}: {error.strerror}"
        return events

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

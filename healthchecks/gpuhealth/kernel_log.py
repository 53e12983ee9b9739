"""Follow the kernel log for XIDs and SXids, from /dev/kmsg or a file.

``/dev/kmsg`` returns one record per read and ``EAGAIN`` when drained; only
a record's first line is its message (the indented ``KEY=value`` lines after
it are the record's dictionary). The reader starts at the end (``SEEK_END``)
unless ``from_start`` is set, so a restarted agent does not report old XIDs
again. A plain file (a saved log, or tests) is followed by offset, whole
lines only. One :class:`~gpuhealth.parsers.kmsg.Parser` lives as long as the
reader, so an SXid's follow-up record read one call later still completes
its SXid.

Nothing here raises for the content of the log. A log that cannot be read
at all sets :attr:`KernelLog.error` (XID detection being blind is a finding
of its own); a driver line that cannot be parsed is *flagged*: the other
lines' events are still returned, and :attr:`KernelLog.flagged` and
:attr:`KernelLog.partial_reason` say what was missed, for as long as the reader
lives, since an XID hidden in such a line may still be unrepaired.
"""

from __future__ import annotations

import errno
import os
from collections import deque
from pathlib import Path

from gpuhealth.parsers.kmsg import FlaggedLine, KernelLogResult, Parser
from gpuhealth.samples import XidEvent

KMSG = Path("/dev/kmsg")
RECORD_BYTES = 8192
FLAGGED_KEPT = 10


class KernelLog:
    def __init__(self, path: Path = KMSG, *, from_start: bool = False) -> None:
        self.path = path
        self.error: str | None = None
        self.flagged: deque[FlaggedLine] = deque(maxlen=FLAGGED_KEPT)
        """The latest driver lines that could not be parsed (numbered from where
        this reader started); :attr:`flagged_total` counts all of them."""
        self.flagged_total = 0
        self._parser = Parser(source=str(path))
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
                lines.append(record.decode(errors="replace").split("\n", 1)[0])
        os.lseek(self._fd, self._offset, os.SEEK_SET)
        chunks = []
        while chunk := os.read(self._fd, 1 << 20):
            chunks.append(chunk)
        data = b"".join(chunks)
        complete = data.rfind(b"\n") + 1
        self._offset += complete
        return data[:complete].decode(errors="replace").splitlines()

    def read(self) -> KernelLogResult:
        """XIDs, SXids and flagged lines written since the last read."""
        if self._fd is None:
            return KernelLogResult()
        try:
            for line in self._lines():
                self._parser.feed(line)
        except OSError as error:
            self.error = f"cannot read {self.path}: {error.strerror}"
        found = self._parser.take()
        self.flagged.extend(found.flagged)
        self.flagged_total += len(found.flagged)
        return found

    def read_new(self) -> list[XidEvent]:
        """The XIDs of :meth:`read`, for a caller that knows no switches; its
        flagged lines are kept in :attr:`flagged` all the same."""
        return list(self.read().xids)

    @property
    def partial_reason(self) -> str | None:
        """Why this reader's view of the log is incomplete, for a person; ``None``
        while every driver line it read was understood."""
        if not self.flagged_total:
            return None
        latest = self.flagged[-1]
        return (
            f"{self.flagged_total} driver line(s) of {self.path} could not be read, so their "
            f"XIDs are unknown; latest: line {latest.line}: {latest.text[:200]!r}"
        )

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

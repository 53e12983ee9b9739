"""The parse error every parser raises."""

from __future__ import annotations

from gpuhealth.errors import GpuhealthError


class ParseError(GpuhealthError, ValueError):
    """Input that is malformed, truncated or empty; the message names where."""

    def __init__(self, message: str, *, source: str = "input", line: int | None = None) -> None:
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {message}")
        self.line = line

"""nccl-tests results: the text table ``all_reduce_perf`` prints, and its ``-J`` JSON.

The text table has 13 columns per row in current nccl-tests (size, count,
type, redop, root, then time/algbw/busbw/#wrong out-of-place and in-place) and
12 in versions without the root column; ``#wrong`` is ``N/A`` when validation
is off. A run is judged on the largest message size (bandwidth-bound), on the
out-of-bounds count and on ``FAILED`` markers, never on the average alone.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from gpuhealth.parsers.errors import ParseError


@dataclass(frozen=True)
class Measurement:
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None


@dataclass(frozen=True)
class Row:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    out_of_place: Measurement | None
    in_place: Measurement


@dataclass(frozen=True)
class NcclResult:
    rows: tuple[Row, ...]
    out_of_bounds: int | None
    avg_busbw_gbps: float | None
    failed: bool
    """nccl-tests printed FAILED (wrong values, or bandwidth under its own -G check)."""
    errors: tuple[str, ...] = ()

    @property
    def largest(self) -> Row:
        return max(self.rows, key=lambda row: row.size_bytes)

    @property
    def peak_busbw_gbps(self) -> float:
        """busbw at the largest size, best of out-of-place and in-place."""
        row = self.largest
        values = [row.in_place.busbw_gbps]
        if row.out_of_place:
            values.append(row.out_of_place.busbw_gbps)
        return max(values)


_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+|nan|inf)\s*(OK|FAILED)?")
_ERROR = re.compile(r"^#\s*error:\s*(.+)$")


def _number(text: str, *, what: str, line: int, source: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ParseError(f"{what} is not a number: {text!r}", source=source, line=line) from None
    if math.isnan(value) or value < 0:
        raise ParseError(f"{what} is {text!r}", source=source, line=line)
    return value


def _wrong(text: str, *, line: int, source: str) -> int | None:
    if text == "N/A":
        return None
    return int(_number(text, what="#wrong", line=line, source=source))


def _measurement(fields: list[str], *, line: int, source: str) -> Measurement:
    time_us, algbw, busbw, wrong = fields
    return Measurement(
        time_us=_number(time_us, what="time", line=line, source=source),
        algbw_gbps=_number(algbw, what="algbw", line=line, source=source),
        busbw_gbps=_number(busbw, what="busbw", line=line, source=source),
        wrong=_wrong(wrong, line=line, source=source),
    )


def parse_text(text: str, *, source: str = "nccl-tests") -> NcclResult:
    rows: list[Row] = []
    out_of_bounds: int | None = None
    average: float | None = None
    failed = False
    errors: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if match := _OOB.match(line):
                out_of_bounds = int(match[1])
                failed = failed or match[2] == "FAILED"
            elif match := _AVG.match(line):
                average = _number(
                    match[1], what="average bus bandwidth", line=number, source=source
                )
                failed = failed or match[2] == "FAILED"
            elif match := _ERROR.match(line):
                errors.append(match[1].strip())
            continue
        fields = line.split()
        if fields[-1] == "FAILED":
            failed = True
            fields = fields[:-1]
        if len(fields) == 12:
            fields.insert(4, "-1")
        if len(fields) != 13 or not fields[0].isdigit():
            raise ParseError(
                f"expected a 13-column result row, got {len(fields)} fields: {line[:200]!r}",
                source=source,
                line=number,
            )
        rows.append(
            Row(
                size_bytes=int(fields[0]),
                count=int(_number(fields[1], what="count", line=number, source=source)),
                dtype=fields[2],
                redop=fields[3],
                out_of_place=_measurement(fields[5:9], line=number, source=source),
                in_place=_measurement(fields[9:13], line=number, source=source),
            )
        )
    if not rows:
        raise ParseError("no result rows (empty or truncated nccl-tests output)", source=source)
    if out_of_bounds is None or average is None:
        raise ParseError(
            "summary lines missing (truncated output: the run did not finish)", source=source
        )
    return NcclResult(
        rows=tuple(rows),
        out_of_bounds=out_of_bounds,
        avg_busbw_gbps=average,
        failed=failed or out_of_bounds > 0,
        errors=tuple(errors),
    )


def _json_measurement(raw: Any, *, path: str, source: str) -> Measurement:
    if not isinstance(raw, dict):
        raise ParseError(f"{path} is not an object", source=source)
    try:
        time_us = raw["time"] if "time" in raw else raw["cpu_time"]
        values = [float(time_us), float(raw["alg_bw"]), float(raw["bus_bw"])]
    except (KeyError, TypeError, ValueError) as error:
        raise ParseError(f"{path}: missing or non-numeric field ({error})", source=source) from None
    if any(math.isnan(v) or v < 0 for v in values):
        raise ParseError(f"{path}: invalid measurement {values}", source=source)
    wrong = raw.get("nwrong")
    return Measurement(
        time_us=values[0],
        algbw_gbps=values[1],
        busbw_gbps=values[2],
        wrong=None if wrong is None else int(float(wrong)),
    )


def parse_json(text: str, *, source: str = "nccl-tests.json") -> NcclResult:
    if not text.strip():
        raise ParseError("empty input", source=source)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ParseError(f"not JSON ({error.msg})", source=source, line=error.lineno) from None
    results = document.get("results") if isinstance(document, dict) else None
    if not isinstance(results, list) or not results:
        raise ParseError("no results list", source=source)
    rows = []
    for index, raw in enumerate(results):
        path = f"results[{index}]"
        if not isinstance(raw, dict) or "size" not in raw:
            raise ParseError(f"{path} has no size", source=source)
        out_raw = raw.get("out_of_place")
        rows.append(
            Row(
                size_bytes=int(raw["size"]),
                count=int(raw.get("count", 0)),
                dtype=str(raw.get("type", "")),
                redop=str(raw.get("redop", "")),
                out_of_place=None
                if out_raw is None
                else _json_measurement(out_raw, path=f"{path}.out_of_place", source=source),
                in_place=_json_measurement(
                    raw.get("in_place"), path=f"{path}.in_place", source=source
                ),
            )
        )
    bounds = document.get("out_of_bounds")
    average = document.get("average_bus_bandwidth")
    if not isinstance(bounds, dict) or not isinstance(average, dict):
        raise ParseError(
            "summary missing (truncated output: the run did not finish)", source=source
        )
    count = int(bounds.get("count", 0))
    errors = tuple(str(e) for e in document.get("errors", []) if e)
    return NcclResult(
        rows=tuple(rows),
        out_of_bounds=count,
        avg_busbw_gbps=float(average["bandwidth"]),
        failed=count > 0 or average.get("okay") == "false",
        errors=errors,
    )

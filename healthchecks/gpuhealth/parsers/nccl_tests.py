"""nccl-tests results: the text ``all_reduce_perf`` prints, and its ``-J`` JSON.

Read from NVIDIA/nccl-tests (``src/common.cu``, and ``src/util.cu`` where
2.17 moved the printing), versions 2.13 to 2.19 and later:

- the header names the run: ``# nccl-tests version``, ``# Collective test
  starting: all_reduce_perf`` (both newer), ``# nThread 1 nGpus 8 ...
  validation: 1``, and one line per rank, ``#  Rank %2d Group %2d Pid %6d on
  %10s device %2d [%s] %s`` (older builds print no ``Group``, and the bus
  id as ``0x18`` rather than ``0000:18:00``), which gives the ranks, the
  hosts and the GPU model;
- the column header names the columns, so rows are read by it: 13 columns
  with ``root``, 12 without (older builds, and ``broadcast`` has no
  ``redop``), the per-iteration and timestamp columns of newer builds; ``#wrong``
  is printed with ``%6g`` (``0``, ``1e+06``, ``1.23457e+06``; ``0e+00`` from
  builds that used ``%6.0le``) or ``N/A`` when validation is off; times and
  bandwidths switch to ``%.1e`` when they outgrow their column;
- ``# Out of bounds values : N OK|FAILED`` and ``# Avg bus bandwidth : %g``
  close the table; output without them did not finish;
- ``-J`` writes the same as JSON (version 2): ``config.devices`` holds the
  first rank line of each process (so ranks = processes x nthreads x ngpus),
  booleans are the strings ``"true"``/``"false"``, a NaN is the string ``"nan"``.

Lines that are not nccl-tests' own (NCCL's ``NCCL INFO`` and ``WARN``
logging, ``mpirun`` noise) are skipped; mpirun's ``--tag-output`` prefix
(``[1,0]<stdout>:``) is removed. A run is judged on the largest message size
(bandwidth-bound), on ``#wrong`` and the out-of-bounds count, and on
``FAILED`` markers, never on the average alone; the floor it is held to is
:mod:`gpuhealth.parsers.nccl_verdict`'s business.

A garbled row is refused with its line number rather than skipped: it might
be the largest size, the only one the verdict reads. Two runs interleaved in
one output (``mpirun`` of a build without ``MPI=1`` starts independent
single-process runs) are refused too: their ranks and bandwidths mean nothing
together.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from gpuhealth.parsers.errors import ParseError


@dataclass(frozen=True)
class Measurement:
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None
    """Wrong elements (``#wrong``); ``None`` when the run did not validate (``N/A``)."""


@dataclass(frozen=True)
class Row:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    out_of_place: Measurement | None
    in_place: Measurement


@dataclass(frozen=True)
class Rank:
    """One ``# Rank`` line: a GPU of the run."""

    rank: int
    host: str
    device: int
    bus_id: str
    gpu: str
    """The CUDA device name, which is the name NVML gives (``NVIDIA H100 80GB HBM3``)."""


@dataclass(frozen=True)
class NcclResult:
    rows: tuple[Row, ...]
    out_of_bounds: int | None
    avg_busbw_gbps: float | None
    failed: bool
    """Wrong data (``#wrong``, out-of-bounds values) or nccl-tests printed FAILED."""
    errors: tuple[str, ...] = ()
    ranks: tuple[Rank, ...] = ()
    """The rank lines printed; in ``-J`` JSON, the first rank of each process."""
    world_size: int | None = None
    """How many ranks took part; ``None`` when the output does not say."""
    host_ranks: tuple[tuple[str, int], ...] = ()
    """Ranks per host, in the order the hosts first appear."""
    collective: str | None = None
    """The test binary, ``all_reduce_perf``; ``None`` for builds that do not print it."""
    version: str | None = None
    """nccl-tests' version (``2.17.6``), printed by newer builds only."""
    nccl_version: int | None = None
    """The NCCL library's version code (``22703``)."""
    validated: bool | None = None
    """Whether the run checked its results (``-c 1``); ``None`` when unknown."""

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

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(host for host, _ in self.host_ranks)

    @property
    def gpu_models(self) -> tuple[str, ...]:
        """The GPU names of the ranks, each once."""
        return tuple(dict.fromkeys(rank.gpu for rank in self.ranks))

    @property
    def wrong_total(self) -> int:
        return sum(m.wrong or 0 for row in self.rows for m in (row.out_of_place, row.in_place) if m)


_TAG = re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>:")
_NCCL_LOG = re.compile(r"^(?:\S+:\d+:\d+ \[\d+\] NCCL |NCCL version )")
_VERSION = re.compile(r"^nccl-tests version (\S+)(?:.*\bnccl-library=(\d+))?")
_COLLECTIVE = re.compile(r"^Collective test starting: (\S+)")
_CONFIG = re.compile(r"^nThread \d+ nGpus \d+\b")
_VALIDATION = re.compile(r"\bvalidation: (\d+)")
_RANK = re.compile(
    r"^Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+)?on\s+(?P<host>\S+)\s+"
    r"device\s+(?P<device>\d+)\s+\[(?P<bus>[^\]]*)\]\s+(?P<gpu>.*?)\s*$"
)
_OOB = re.compile(r"^Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?")
_AVG = re.compile(r"^Avg bus bandwidth\s*:\s*(\S+)\s*(OK|FAILED)?")
_ERROR = re.compile(r"^error:\s*(.+)$")
_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# Columns of builds that print no column header: with and without `root`.
_MEASURED = ("time", "algbw", "busbw", "#wrong")
_COLUMNS_13 = ["size", "count", "type", "redop", "root", *_MEASURED, *_MEASURED]
_COLUMNS_12 = ["size", "count", "type", "redop", *_MEASURED, *_MEASURED]


def _number(text: str, *, what: str, line: int, source: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ParseError(f"{what} is not a number: {text!r}", source=source, line=line) from None
    if math.isnan(value) or value < 0:
        raise ParseError(f"{what} is {text!r}", source=source, line=line)
    return value


def _wrong(text: str, *, line: int, source: str) -> int | None:
    """``#wrong`` as ``%g`` prints it: ``0``, ``1024``, ``1e+06``; ``N/A`` unvalidated."""
    if text == "N/A":
        return None
    return round(_number(text, what="#wrong", line=line, source=source))


@dataclass(frozen=True)
class _Layout:
    """Where a row's values are, read from the column header."""

    width: int
    prefix: dict[str, int]
    groups: tuple[tuple[int, int, int, int], ...]
    """(time, algbw, busbw, #wrong) of out-of-place then in-place."""
    timestamp: bool


def _layout(columns: list[str]) -> _Layout | None:
    names = [c.lower() for c in columns]
    busbw = [i for i, name in enumerate(names) if name == "busbw"]
    if not busbw or "size" not in names or any(i < 2 or i + 1 >= len(names) for i in busbw):
        return None
    timestamp = names[-1] == "timestamp"
    width = len(names) + (1 if timestamp else 0)  # a timestamp prints as date and time
    prefix = {name: i for i, name in enumerate(names[: busbw[0] - 2])}
    groups = tuple((i - 2, i - 1, i, i + 1) for i in busbw)
    return _Layout(width=width, prefix=prefix, groups=groups[-2:], timestamp=timestamp)


def _measurement(
    fields: list[str], at: tuple[int, int, int, int], line: int, src: str
) -> Measurement:
    time_us, algbw, busbw, wrong = (fields[i] for i in at)
    return Measurement(
        time_us=_number(time_us, what="time", line=line, source=src),
        algbw_gbps=_number(algbw, what="algbw", line=line, source=src),
        busbw_gbps=_number(busbw, what="busbw", line=line, source=src),
        wrong=_wrong(wrong, line=line, source=src),
    )


def _row(fields: list[str], layout: _Layout | None, line: int, source: str) -> Row:
    if layout is None:
        layout = _layout(_COLUMNS_13 if len(fields) == 13 else _COLUMNS_12)
        assert layout is not None
    if len(fields) != layout.width or not fields[0].isdigit():
        raise ParseError(
            f"expected a {layout.width}-column result row, got {len(fields)} fields: "
            f"{' '.join(fields)[:200]!r}",
            source=source,
            line=line,
        )
    if layout.timestamp and not _TIMESTAMP.match(fields[-2]):
        raise ParseError(
            f"no timestamp at the end of the row: {fields[-2:]}", source=source, line=line
        )
    at = layout.prefix
    *outer, inner = layout.groups
    return Row(
        size_bytes=int(fields[at["size"]]),
        count=int(_number(fields[at["count"]], what="count", line=line, source=source)),
        dtype=fields[at["type"]] if "type" in at else "",
        redop=fields[at["redop"]] if "redop" in at else "",
        out_of_place=_measurement(fields, outer[0], line, source) if outer else None,
        in_place=_measurement(fields, inner, line, source),
    )


def _host_ranks(hosts: list[str], per_entry: int = 1) -> tuple[tuple[str, int], ...]:
    return tuple((host, count * per_entry) for host, count in Counter(hosts).items())


class _TextRun:
    """The state of one pass over nccl-tests' text output."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.rows: list[Row] = []
        self.ranks: dict[int, Rank] = {}
        self.layout: _Layout | None = None
        self.out_of_bounds: int | None = None
        self.average: float | None = None
        self.failed = False
        self.errors: list[str] = []
        self.collective: str | None = None
        self.version: str | None = None
        self.nccl_version: int | None = None
        self.validated: bool | None = None
        self.configs = 0

    def comment(self, body: str, number: int) -> None:
        if match := _RANK.match(body):
            rank = int(match["rank"])
            if rank in self.ranks:
                raise ParseError(
                    f"rank {rank} is printed twice: the output holds independent runs "
                    "(an nccl-tests build without MPI=1 under mpirun?)",
                    source=self.source,
                    line=number,
                )
            self.ranks[rank] = Rank(
                rank=rank,
                host=match["host"],
                device=int(match["device"]),
                bus_id=match["bus"],
                gpu=match["gpu"],
            )
        elif _CONFIG.match(body):
            self.configs += 1
            if match := _VALIDATION.search(body):
                self.validated = match[1] != "0"
        elif match := _VERSION.match(body):
            self.version = match[1]
            self.nccl_version = None if match[2] is None else int(match[2])
        elif match := _COLLECTIVE.match(body):
            self.collective = match[1]
        elif match := _OOB.match(body):
            self.out_of_bounds = int(match[1])
            self.failed = self.failed or match[2] == "FAILED"
        elif match := _AVG.match(body):
            value = float(match[1]) if match[1].lower() not in ("nan", "-nan") else math.nan
            self.average = None if math.isnan(value) else value
            self.failed = self.failed or match[2] == "FAILED"
        elif match := _ERROR.match(body):
            self.errors.append(match[1].strip())
        elif (columns := body.split()) and "busbw" in columns and (found := _layout(columns)):
            self.layout = found

    def line(self, raw: str, number: int) -> None:
        line = _TAG.sub("", raw).strip()
        if not line or _NCCL_LOG.match(line):
            return
        if line.startswith("#"):
            self.comment(line.lstrip("#").strip(), number)
            return
        if not line[0].isdigit():
            return  # not nccl-tests' output: mpirun, ssh, the shell
        fields = line.split()
        if fields[-1] == "FAILED":
            self.failed = True
            fields = fields[:-1]
        self.rows.append(_row(fields, self.layout, number, self.source))

    def result(self) -> NcclResult:
        if not self.rows:
            raise ParseError(
                "no result rows (empty or truncated nccl-tests output)", source=self.source
            )
        if self.out_of_bounds is None:
            raise ParseError(
                "summary lines missing (truncated output: the run did not finish)",
                source=self.source,
            )
        if self.configs > 1:
            raise ParseError(
                f"{self.configs} '# nThread' headers: the output holds independent runs "
                "(an nccl-tests build without MPI=1 under mpirun?)",
                source=self.source,
            )
        ranks = tuple(self.ranks[r] for r in sorted(self.ranks))
        wrong = any(
            (m.wrong or 0) > 0 for row in self.rows for m in (row.out_of_place, row.in_place) if m
        )
        return NcclResult(
            rows=tuple(self.rows),
            out_of_bounds=self.out_of_bounds,
            avg_busbw_gbps=self.average,
            failed=self.failed or wrong or self.out_of_bounds > 0,
            errors=tuple(self.errors),
            ranks=ranks,
            world_size=len(ranks) or None,
            host_ranks=_host_ranks([r.host for r in ranks]),
            collective=self.collective,
            version=self.version,
            nccl_version=self.nccl_version,
            validated=self.validated,
        )


def parse_text(text: str, *, source: str = "nccl-tests") -> NcclResult:
    run = _TextRun(source)
    for number, raw in enumerate(text.splitlines(), start=1):
        run.line(raw, number)
    return run.result()


def _json_number(raw: Any, *, path: str, source: str) -> float:
    """A JSON number, or nccl-tests' ``"nan"`` string (refused)."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ParseError(f"{path}: not a number: {raw!r}", source=source) from None
    if math.isnan(value) or value < 0:
        raise ParseError(f"{path}: invalid value {raw!r}", source=source)
    return value


def _json_measurement(raw: Any, *, path: str, source: str) -> Measurement:
    if not isinstance(raw, dict):
        raise ParseError(f"{path} is not an object", source=source)
    for key in ("alg_bw", "bus_bw"):
        if key not in raw:
            raise ParseError(f"{path}: missing or non-numeric field ({key!r})", source=source)
    if "time" not in raw and "cpu_time" not in raw:
        raise ParseError(f"{path}: missing or non-numeric field ('time')", source=source)
    key = "time" if "time" in raw else "cpu_time"
    wrong = raw.get("nwrong")
    return Measurement(
        time_us=_json_number(raw[key], path=f"{path}.{key}", source=source),
        algbw_gbps=_json_number(raw["alg_bw"], path=f"{path}.alg_bw", source=source),
        busbw_gbps=_json_number(raw["bus_bw"], path=f"{path}.bus_bw", source=source),
        wrong=None
        if wrong is None
        else round(_json_number(wrong, path=f"{path}.nwrong", source=source)),
    )


def _json_row(raw: Any, *, path: str, source: str) -> Row:
    if not isinstance(raw, dict) or "size" not in raw:
        raise ParseError(f"{path} has no size", source=source)
    out_raw = raw.get("out_of_place")
    return Row(
        size_bytes=int(_json_number(raw["size"], path=f"{path}.size", source=source)),
        count=int(_json_number(raw.get("count", 0), path=f"{path}.count", source=source)),
        dtype=str(raw.get("type", "")),
        redop=str(raw.get("redop", "")),
        out_of_place=None
        if out_raw is None
        else _json_measurement(out_raw, path=f"{path}.out_of_place", source=source),
        in_place=_json_measurement(raw.get("in_place"), path=f"{path}.in_place", source=source),
    )


def _json_ranks(config: Any, source: str) -> tuple[tuple[Rank, ...], int | None, int]:
    """(the first rank of each process, the world size, ranks per process)."""
    if not isinstance(config, dict):
        return (), None, 1
    per_process = int(config.get("nthreads", 1) or 1) * int(config.get("ngpus", 1) or 1)
    ranks = []
    for index, device in enumerate(config.get("devices") or []):
        path = f"config.devices[{index}]"
        if not isinstance(device, dict) or "hostname" not in device:
            raise ParseError(f"{path} has no hostname", source=source)
        ranks.append(
            Rank(
                rank=int(
                    _json_number(device.get("rank", index), path=f"{path}.rank", source=source)
                ),
                host=str(device["hostname"]),
                device=int(
                    _json_number(device.get("device", 0), path=f"{path}.device", source=source)
                ),
                bus_id=str(device.get("device_hex", "")),
                gpu=str(device.get("device_info", "")),
            )
        )
    return tuple(ranks), (len(ranks) * per_process) or None, per_process


def parse_json(text: str, *, source: str = "nccl-tests.json") -> NcclResult:
    if not text.strip():
        raise ParseError("empty input", source=source)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ParseError(
            f"not JSON ({error.msg}); truncated output?", source=source, line=error.lineno
        ) from None
    results = document.get("results") if isinstance(document, dict) else None
    if not isinstance(results, list) or not results:
        raise ParseError("no results list", source=source)
    rows = tuple(
        _json_row(raw, path=f"results[{i}]", source=source) for i, raw in enumerate(results)
    )
    bounds = document.get("out_of_bounds")
    average = document.get("average_bus_bandwidth")
    if not isinstance(bounds, dict) or not isinstance(average, dict):
        raise ParseError(
            "summary missing (truncated output: the run did not finish)", source=source
        )
    count = int(_json_number(bounds.get("count", 0), path="out_of_bounds.count", source=source))
    bandwidth = average.get("bandwidth")
    config = document.get("config")
    ranks, world, per_process = _json_ranks(config, source)
    args = document.get("args")
    name = results[0].get("experiment_name") if isinstance(results[0], dict) else None
    if not name and isinstance(args, list) and args:
        name = os.path.basename(str(args[0]))
    validation = config.get("validation") if isinstance(config, dict) else None
    wrong = any((m.wrong or 0) > 0 for row in rows for m in (row.out_of_place, row.in_place) if m)
    return NcclResult(
        rows=rows,
        out_of_bounds=count,
        avg_busbw_gbps=None if bandwidth in (None, "nan") else float(bandwidth),
        failed=count > 0
        or wrong
        or bounds.get("okay") == "false"
        or average.get("okay") == "false",
        errors=tuple(str(e) for e in document.get("errors", []) or [] if e),
        ranks=ranks,
        world_size=world,
        host_ranks=_host_ranks([r.host for r in ranks], per_process),
        collective=str(name) if name else None,
        nccl_version=int(document["nccl_version"]) if "nccl_version" in document else None,
        validated=None if validation is None else bool(validation),
    )

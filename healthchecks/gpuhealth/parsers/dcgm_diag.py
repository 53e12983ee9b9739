"""``dcgmi diag -r <level> -j`` of DCGM 3.x and 4.x: per-test, per-GPU results.

The two majors print different documents for the same diagnostic (read from
NVIDIA/DCGM ``dcgmi/Diag.cpp`` of each, and ``testing/python3/dcgm_diag_schema.json``):

- 3.x nests everything under ``"DCGM GPU Diagnostic"``; tests carry display
  names ("GPU Memory", "Memory Bandwidth", "Targeted Stress"), the Deployment
  category has one test per software check ("Denylist", "Persistence Mode"),
  a GPU's result names it as ``gpu_id`` (a string), ``info`` is a string, and
  a warning is printed as ``Fail``;
- 4.x nests under ``"DCGM Diagnostic"``; tests carry plugin names
  (``software``, ``memory``, ``memory_bandwidth``, ``targeted_stress``...),
  results name an entity (``entity_group`` ``GPU``/``CPU``/..., ``entity_id``),
  ``info`` is a list of strings, and each test has a ``test_summary`` with the
  overall status and the errors that belong to no entity.

Both may also print a runtime-error document (``{root: {"version",
"runtime_error"}}``, the diagnostic did not run) or, with ``--iterations``,
``{"iterations": [...], "Overall Result": ...}``.

Test names are normalised to the 4.x plugin name (:data:`TEST_NAMES`), so a
policy or a dashboard names one test whatever DCGM the node runs; the name
the document used is kept in :attr:`DiagResult.reported_test`. The error id
and message of every warning are kept, and DCGM's own severity decides the
fault class, because it is the tool's verdict on whether the GPU must be
isolated or merely reset. Anything the parser cannot read is a
:class:`ParseError` naming the JSON path, never a result it guessed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from gpuhealth.parsers.errors import ParseError
from gpuhealth.report import CheckStatus, FaultClass, RecommendedAction

ROOT_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")  # 4.x, 3.x
ROOT_KEY = ROOT_KEYS[1]

STATUS: dict[str, CheckStatus] = {
    "pass": CheckStatus.PASS,
    "fail": CheckStatus.FAIL,
    "warn": CheckStatus.WARN,
    "skip": CheckStatus.SKIPPED,
    "not run": CheckStatus.SKIPPED,
    "": CheckStatus.SKIPPED,  # 4.x prints DCGM_DIAG_RESULT_NOT_RUN as an empty string
}

# dcgmErrorSeverity_t (dcgm_errors.h) -> what it means for the node
SEVERITY: dict[int, tuple[FaultClass, RecommendedAction]] = {
    0: (FaultClass.NONE, RecommendedAction.NONE),
    1: (FaultClass.WATCH, RecommendedAction.NONE),  # monitor
    2: (FaultClass.FATAL, RecommendedAction.REPLACE),  # isolate
    3: (FaultClass.DEGRADED, RecommendedAction.NONE),  # unknown
    4: (FaultClass.DEGRADED, RecommendedAction.NONE),  # triage
    5: (FaultClass.NONE, RecommendedAction.NONE),  # configuration, not the GPU
    6: (FaultClass.DEGRADED, RecommendedAction.RESET_GPU),  # reset
}

SOFTWARE = "software"
# 3.x display name (lower case) -> the 4.x plugin name. 3.x ran the software
# checks as separate Deployment tests; 4.x runs them as one plugin, `software`.
# A name not listed is lower-cased with runs of other characters made `_`,
# which maps the remaining 3.x names ("Pulse Test" -> pulse_test) as well.
TEST_NAMES: dict[str, str] = {
    "gpu memory": "memory",
    "eud test": "eud",
    "cpu eud test": "cpu_eud",
    **dict.fromkeys(
        (
            "denylist",
            "blacklist",
            "nvml library",
            "cuda main library",
            "cuda toolkit library",
            "permissions and os blocks",
            "persistence mode",
            "environment variables",
            "page retirement/row remap",
            "graphics processes",
            "inforom",
        ),
        SOFTWARE,
    ),
}


@dataclass(frozen=True)
class DiagResult:
    category: str
    test: str
    """The 4.x plugin name (:data:`TEST_NAMES`), whichever DCGM printed the document."""
    gpu: int | None
    status: CheckStatus
    fault_class: FaultClass
    action: RecommendedAction
    message: str
    error_id: int | None = None
    """The first warning's ``dcgmError_t`` code; all of them are in :attr:`error_ids`."""
    reported_test: str = ""
    """The test name as the document spelt it ("Memory Bandwidth", ``memory_bandwidth``)."""
    entity: str = ""
    """``GPU1``, ``CPU0``...; empty for a result about the whole test (4.x ``test_summary``)."""
    error_ids: tuple[int, ...] = ()
    iteration: int | None = None
    """Index in ``iterations`` for a document of several runs, else ``None``."""


@dataclass(frozen=True)
class DiagReport:
    results: tuple[DiagResult, ...]
    dcgm_version: str = ""
    driver_version: str = ""
    preamble: tuple[str, ...] = ()
    """Lines dcgmi printed before the JSON document (an ``Error:`` line, say)."""


def normalize_test_name(name: str) -> str:
    """``Memory Bandwidth`` (3.x) and ``memory_bandwidth`` (4.x) -> ``memory_bandwidth``."""
    key = name.strip().lower()
    return TEST_NAMES.get(key) or re.sub(r"[^a-z0-9]+", "_", key).strip("_")


class _Reader:
    """Walks one document; every refusal names the JSON path it stopped at."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, message: str) -> ParseError:
        return ParseError(f"{path}: {message}", source=self.source)

    def object(self, value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected an object, got {type(value).__name__}")
        return value

    def array(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list, got {type(value).__name__}")
        return value

    def integer(self, value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise self.fail(path, f"expected an integer, got {value!r}")
        try:
            return int(value)
        except ValueError:
            raise self.fail(path, f"expected an integer, got {value!r}") from None

    def optional_integer(self, value: Any, path: str) -> int | None:
        return None if value is None else self.integer(value, path)

    def texts(self, value: Any, path: str) -> list[str]:
        """``info``: a string in 3.x, a list of strings in 4.x."""
        if value is None:
            return []
        if isinstance(value, str):
            return [value] if value else []
        return [str(v) for v in self.array(value, path) if v]

    def status(self, raw: dict[str, Any], path: str) -> CheckStatus:
        value = raw.get("status", "")
        if not isinstance(value, str) or value.strip().lower() not in STATUS:
            raise self.fail(f"{path}.status", f"unknown status {value!r}")
        return STATUS[value.strip().lower()]

    def warnings(self, raw: dict[str, Any], path: str) -> list[tuple[str, int | None, int | None]]:
        """(text, error id, severity) of each warning. 3.x puts a level-one test's
        text under ``warnings`` (sic) inside the warning object; older releases
        list bare strings."""
        found: list[tuple[str, int | None, int | None]] = []
        for index, warning in enumerate(self.array(raw.get("warnings"), f"{path}.warnings")):
            where = f"{path}.warnings[{index}]"
            if isinstance(warning, str):
                found.append((warning, None, None))
                continue
            item = self.object(warning, where)
            text = item.get("warning", item.get("warnings", ""))
            found.append(
                (
                    str(text),
                    self.optional_integer(item.get("error_id"), f"{where}.error_id"),
                    self.optional_integer(item.get("error_severity"), f"{where}.error_severity"),
                )
            )
        return found

    def entity(self, raw: dict[str, Any], path: str) -> tuple[str, int | None]:
        if "gpu_id" in raw:
            gpu = self.integer(raw["gpu_id"], f"{path}.gpu_id")
            return f"GPU{gpu}", gpu
        if "entity_id" not in raw:
            return "", None
        number = self.integer(raw["entity_id"], f"{path}.entity_id")
        group = str(raw.get("entity_group", "GPU"))
        return f"{group}{number}", number if group.upper() == "GPU" else None


def _classify(status: CheckStatus, severity: int | None) -> tuple[FaultClass, RecommendedAction]:
    if status is CheckStatus.WARN:
        return FaultClass.WATCH, RecommendedAction.NONE
    if status is not CheckStatus.FAIL:
        return FaultClass.NONE, RecommendedAction.NONE
    if severity is None:
        return FaultClass.DEGRADED, RecommendedAction.NONE
    return SEVERITY.get(severity, (FaultClass.DEGRADED, RecommendedAction.NONE))


@dataclass(frozen=True)
class _Test:
    category: str
    name: str
    iteration: int | None


def _result(
    reader: _Reader, raw: Any, path: str, test: _Test, *, summary: bool = False
) -> DiagResult:
    item = reader.object(raw, path)
    status = reader.status(item, path)
    warnings = reader.warnings(item, path)
    entity, gpu = ("", None) if summary else reader.entity(item, path)
    severity = max((s for _, _, s in warnings if s is not None), default=None)
    fault_class, action = _classify(status, severity)
    info = reader.texts(item.get("info"), f"{path}.info")
    message = "; ".join(w for w, _, _ in warnings if w) or "; ".join(info)
    if status is CheckStatus.SKIPPED and not message:
        message = "not run"
    error_ids = tuple(e for _, e, _ in warnings if e is not None)
    return DiagResult(
        category=test.category,
        test=normalize_test_name(test.name),
        gpu=gpu,
        status=status,
        fault_class=fault_class,
        action=action,
        message=message,
        error_id=error_ids[0] if error_ids else None,
        reported_test=test.name,
        entity=entity,
        error_ids=error_ids,
        iteration=test.iteration,
    )


def _test_results(reader: _Reader, raw: Any, path: str, test: _Test) -> list[DiagResult]:
    item = reader.object(raw, path)
    results = [
        _result(reader, r, f"{path}.results[{i}]", test)
        for i, r in enumerate(reader.array(item.get("results"), f"{path}.results"))
    ]
    if "test_summary" in item:
        summary = _result(reader, item["test_summary"], f"{path}.test_summary", test, summary=True)
        said = {r.message for r in results}
        # The summary repeats the entities' verdict; it adds a result only for a
        # test that reported no entity, or for errors that belong to no entity.
        if not results or (summary.error_ids and summary.message not in said):
            results.append(summary)
    return results


def _single(
    reader: _Reader, document: Any, path: str, iteration: int | None
) -> tuple[list[DiagResult], str, str]:
    doc = reader.object(document, path or "document")
    key = next((k for k in ROOT_KEYS if k in doc), None)
    if key is None:
        raise reader.fail(path or "document", f"no {ROOT_KEYS[0]!r} or {ROOT_KEYS[1]!r} object")
    root_path = f"{path}{'.' if path else ''}{key!r}"
    root = reader.object(doc[key], root_path)
    if "runtime_error" in root:
        why = root["runtime_error"]
        raise reader.fail(f"{root_path}.runtime_error", f"dcgmi did not run the diagnostic: {why}")
    if not isinstance(root.get("test_categories"), list):
        raise reader.fail(root_path, "no test_categories list")
    results: list[DiagResult] = []
    for c_index, category in enumerate(root["test_categories"]):
        c_path = f"{root_path}.test_categories[{c_index}]"
        c_item = reader.object(category, c_path)
        for t_index, test in enumerate(reader.array(c_item.get("tests"), f"{c_path}.tests")):
            t_path = f"{c_path}.tests[{t_index}]"
            if test is None:  # 3.x leaves a null where it skipped a level-one test
                continue
            name = reader.object(test, t_path).get("name")
            if not isinstance(name, str) or not name:
                raise reader.fail(t_path, "test has no name")
            found = _Test(category=str(c_item.get("category", "")), name=name, iteration=iteration)
            results.extend(_test_results(reader, test, t_path, found))
    metadata: dict[str, Any] = doc["metadata"] if isinstance(doc.get("metadata"), dict) else {}
    version = str(metadata.get("version") or doc.get("version") or root.get("version") or "")
    driver = str(
        metadata.get("Driver Version Detected") or doc.get("Driver Version Detected") or ""
    )
    return results, version, driver


def _iterations(reader: _Reader, document: dict[str, Any]) -> tuple[list[DiagResult], str, str]:
    results: list[DiagResult] = []
    version = driver = ""
    for index, run in enumerate(reader.array(document["iterations"], "iterations")):
        if run is None:  # an iteration that printed nothing (it aborted)
            continue
        found, version, driver = _single(reader, run, f"iterations[{index}]", index)
        results.extend(found)
    overall = str(document.get("Overall Result", ""))
    if overall.lower() == "fail" and not any(r.status is CheckStatus.FAIL for r in results):
        results.append(
            DiagResult(
                category="",
                test="overall",
                gpu=None,
                status=CheckStatus.FAIL,
                fault_class=FaultClass.DEGRADED,
                action=RecommendedAction.NONE,
                message=str(document.get("Warning", "")) or "Overall Result: Fail",
                reported_test="Overall Result",
            )
        )
    return results, version, driver


def _document(text: str, source: str) -> tuple[Any, tuple[str, ...]]:
    """The JSON document, and whatever dcgmi printed on lines before it."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("{")), None)
    if start is None:
        raise ParseError("no JSON document (no line starts with '{')", source=source)
    body = "".join(lines[start:])
    try:
        document, end = json.JSONDecoder().raw_decode(body.lstrip())
    except json.JSONDecodeError as error:
        raise ParseError(
            f"not JSON ({error.msg}, column {error.colno}); truncated output?",
            source=source,
            line=start + error.lineno,
        ) from None
    if body.lstrip()[end:].strip():
        raise ParseError("text after the JSON document", source=source)
    return document, tuple(line.rstrip("\n") for line in lines[:start] if line.strip())


def parse_report(text: str, *, source: str = "dcgmi-diag.json") -> DiagReport:
    """The whole document: results, DCGM and driver versions, any preamble."""
    if not text.strip():
        raise ParseError("empty input", source=source)
    document, preamble = _document(text, source)
    reader = _Reader(source)
    if isinstance(document, dict) and "iterations" in document:
        results, version, driver = _iterations(reader, document)
    else:
        results, version, driver = _single(reader, document, "", None)
    if not results:
        raise ParseError("no test results", source=source)
    return DiagReport(
        results=tuple(results), dcgm_version=version, driver_version=driver, preamble=preamble
    )


def parse(text: str, *, source: str = "dcgmi-diag.json") -> list[DiagResult]:
    """The results of :func:`parse_report`."""
    return list(parse_report(text, source=source).results)

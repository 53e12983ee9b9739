"""``dcgmi diag -r <level> -j``: per-test, per-GPU results with severity.

DCGM 3.x/4.x nest results under ``"DCGM GPU Diagnostic"`` ->
``test_categories`` -> ``tests`` -> ``results``; each result names its GPU
(``gpu_id``, or ``entity_id`` with ``entity_group: GPU``) and, when it did
not pass, ``warnings`` with an ``error_id`` and ``error_severity``. Older
releases put the text in ``warnings`` as plain strings or in ``info``; both
are accepted. DCGM's own severity decides the fault class, because it is the
tool's verdict on whether the GPU must be isolated or merely reset.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gpuhealth.parsers.errors import ParseError
from gpuhealth.report import CheckStatus, FaultClass, RecommendedAction

ROOT_KEY = "DCGM GPU Diagnostic"

STATUS: dict[str, CheckStatus] = {
    "pass": CheckStatus.PASS,
    "fail": CheckStatus.FAIL,
    "warn": CheckStatus.WARN,
    "skip": CheckStatus.SKIPPED,
    "not run": CheckStatus.SKIPPED,
}

# dcgmErrorSeverity_t -> what it means for the node
SEVERITY: dict[int, tuple[FaultClass, RecommendedAction]] = {
    0: (FaultClass.NONE, RecommendedAction.NONE),
    1: (FaultClass.WATCH, RecommendedAction.NONE),  # monitor
    2: (FaultClass.FATAL, RecommendedAction.REPLACE),  # isolate
    3: (FaultClass.DEGRADED, RecommendedAction.NONE),  # unknown
    4: (FaultClass.DEGRADED, RecommendedAction.NONE),  # triage
    5: (FaultClass.NONE, RecommendedAction.NONE),  # configuration, not the GPU
    6: (FaultClass.DEGRADED, RecommendedAction.RESET_GPU),  # reset
}


@dataclass(frozen=True)
class DiagResult:
    category: str
    test: str
    gpu: int | None
    status: CheckStatus
    fault_class: FaultClass
    action: RecommendedAction
    message: str
    error_id: int | None = None


def _gpu(result: dict[str, Any]) -> int | None:
    if "gpu_id" in result:
        return int(result["gpu_id"])
    if str(result.get("entity_group", "GPU")).upper() == "GPU" and "entity_id" in result:
        return int(result["entity_id"])
    return None


def _warnings(result: dict[str, Any]) -> list[tuple[str, int | None, int | None]]:
    found: list[tuple[str, int | None, int | None]] = []
    for warning in result.get("warnings", []) or []:
        if isinstance(warning, str):
            found.append((warning, None, None))
        elif isinstance(warning, dict):
            error_id = warning.get("error_id")
            severity = warning.get("error_severity")
            found.append(
                (
                    str(warning.get("warning", "")),
                    None if error_id is None else int(error_id),
                    None if severity is None else int(severity),
                )
            )
    return found


def _classify(status: CheckStatus, severity: int | None) -> tuple[FaultClass, RecommendedAction]:
    if status is not CheckStatus.FAIL:
        return (
            (FaultClass.WATCH, RecommendedAction.NONE)
            if status is CheckStatus.WARN
            else (FaultClass.NONE, RecommendedAction.NONE)
        )
    if severity is None:
        return FaultClass.DEGRADED, RecommendedAction.NONE
    return SEVERITY.get(severity, (FaultClass.DEGRADED, RecommendedAction.NONE))


def parse(text: str, *, source: str = "dcgmi-diag.json") -> list[DiagResult]:
    if not text.strip():
        raise ParseError("empty input", source=source)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ParseError(
            f"not JSON ({error.msg}); truncated output?", source=source, line=error.lineno
        ) from None
    root = document.get(ROOT_KEY) if isinstance(document, dict) else None
    if not isinstance(root, dict) or not isinstance(root.get("test_categories"), list):
        raise ParseError(f"no {ROOT_KEY!r}.test_categories list", source=source)
    results: list[DiagResult] = []
    for c_index, category in enumerate(root["test_categories"]):
        for t_index, test in enumerate(category.get("tests", [])):
            path = f"test_categories[{c_index}].tests[{t_index}]"
            if not isinstance(test, dict) or "name" not in test:
                raise ParseError(f"{path} has no name", source=source)
            for r_index, result in enumerate(test.get("results", [])):
                raw_status = str(result.get("status", "")).strip().lower()
                if raw_status not in STATUS:
                    raise ParseError(
                        f"{path}.results[{r_index}]: unknown status {result.get('status')!r}",
                        source=source,
                    )
                status = STATUS[raw_status]
                warnings = _warnings(result)
                severity = max((s for _, _, s in warnings if s is not None), default=None)
                fault_class, action = _classify(status, severity)
                message = "; ".join(w for w, _, _ in warnings if w) or str(result.get("info", ""))
                results.append(
                    DiagResult(
                        category=str(category.get("category", "")),
                        test=str(test["name"]),
                        gpu=_gpu(result),
                        status=status,
                        fault_class=fault_class,
                        action=action,
                        message=message,
                        error_id=next((e for _, e, _ in warnings if e is not None), None),
                    )
                )
    if not results:
        raise ParseError("no test results", source=source)
    return results

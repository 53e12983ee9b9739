"""What an agent's report says about the node, as the agent decides whether to write it.

The agent writes its GPUNode status when the *findings* change, never when a
reading does (on real NVML temperature, power and counters move every sweep;
writing on every change of a value would make 4,000 agents at 30 s write
~133 times a second instead of the ~13 the heartbeat allows). A finding is
(check, GPU, status, fault class) for a check that warns or fails.

A check that could not run (``error``: a transient NVML failure) is no
evidence either way, so it keeps the verdict it had: a failing GPU whose read
fails once is still failing, a healthy one still healthy, and neither costs
a write. The error itself rides with the next write or heartbeat, and the
check runs again at the next sweep.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from gpuhealth.report import CheckResult, CheckStatus

Key = tuple[str, int]
"""(check name, GPU index or -1 for the node)."""
Verdicts = Mapping[Key, frozenset[tuple[str, str]]]
"""Each (check, GPU) that has findings -> its (status, fault class) pairs."""

FINDING = (CheckStatus.FAIL, CheckStatus.WARN)


def verdicts(
    results: Iterable[CheckResult], previous: Verdicts
) -> dict[Key, frozenset[tuple[str, str]]]:
    """The findings of ``results``; a (check, GPU) that only errored keeps ``previous``."""
    ran: dict[Key, set[tuple[str, str]]] = {}
    errored: set[Key] = set()
    for check in results:
        key = (check.name, -1 if check.gpu is None else check.gpu)
        if check.status is CheckStatus.ERROR:
            errored.add(key)
            continue
        found = ran.setdefault(key, set())
        if check.status in FINDING:
            found.add((check.status.value, check.fault_class.value))
    for key in errored - ran.keys():
        if key in previous:
            ran[key] = set(previous[key])
    return {key: frozenset(found) for key, found in ran.items() if found}


def fingerprint(found: Verdicts, *, gpus: Iterable[int], repair: str) -> str:
    """What counts as "changed": the findings, which GPUs are there, and the
    acknowledged repair (the operator judges a rung by it)."""
    return json.dumps(
        {
            "findings": sorted((name, gpu, sorted(pairs)) for (name, gpu), pairs in found.items()),
            "gpus": sorted(gpus),
            "repair": repair,
        }
    )

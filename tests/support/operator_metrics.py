"""The operator's own metrics, as the e2e tests read them (from whichever operator
process leads: only the leader accounts)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from pitcrew.dev.stack import SimStack

OPERATORS = ("operator-a", "operator-b")


def process_samples(pitcrew: SimStack, name: str) -> list[Sample]:
    """One operator process's samples; none if it is not running."""
    process = pitcrew.running.get(name)
    if process is None or process.poll() is not None:
        return []
    url = f"http://127.0.0.1:{pitcrew.metrics_port(name)}/metrics"
    with urllib.request.urlopen(url, timeout=5) as answer:
        text = answer.read().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def samples(pitcrew: SimStack) -> Iterator[Sample]:
    """The metric samples of whichever operator leads (only the leader accounts)."""
    for name in OPERATORS:
        yield from process_samples(pitcrew, name)


def leader_job_seconds(pitcrew: SimStack, job: str) -> tuple[str, dict[str, float]]:
    """The leading process and its own ``pitcrew_job_seconds_total`` of ``job`` by
    category: a leader that took over counts from its own start, so a comparison
    over time must stay within one leader's counters."""
    for name in OPERATORS:
        found = process_samples(pitcrew, name)
        if any(s.name == "pitcrew_leader" and s.value == 1 for s in found):
            return name, {
                s.labels["category"]: s.value
                for s in found
                if s.name == "pitcrew_job_seconds_total" and s.labels.get("training_job") == job
            }
    return "", {}


def job_metrics(pitcrew: SimStack, job: str) -> dict[tuple[str, str], float]:
    found: dict[tuple[str, str], float] = {}
    for sample in samples(pitcrew):
        if sample.labels.get("training_job") != job:
            continue
        key = (sample.name, sample.labels.get("category") or sample.labels.get("cause", ""))
        found[key] = found.get(key, 0.0) + sample.value
    return found


def gauges(pitcrew: SimStack, name: str) -> dict[str, float]:
    """One gauge by training job."""
    return {s.labels["training_job"]: s.value for s in samples(pitcrew) if s.name == name}

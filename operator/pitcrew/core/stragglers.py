"""Which node slows its job down: streaks of slow reports, decided without I/O.

A synchronous job runs at the pace of its slowest rank. Rank 0's progress report
(the framework hooks gather every rank's compute time, :mod:`pitcrew.client.distributed`)
says the job's median step time and names the nodes furthest behind their usual pace,
each with the time its rank would have taken at that pace: ranks are not alike (a
pipeline's stages, MoE experts), and a rank that was always slower than the median
is the job's shape, not a fault (:mod:`pitcrew.client.ranks`). A node's time is
judged against that usual time, or against the job's median where the report names
none (a hand-written report, an older client). One slow report is noise: a
page-cache miss, a data loader, a neighbour's checkpoint. A node named slower than
its usual by the policy's threshold in ``consecutiveReports`` reports in a row is the
job's straggler, and the lifecycle takes it out like a degraded fault (reason
``Straggler``).

The report is written by the tenant's own code, so it is trusted only about the
tenant's own nodes: a node counts only where the job has a pod running, and only
while the node is in service. A report naming any other node is ignored; at worst a
tenant can take out the nodes its own job runs on, which it could slow down (and so
have taken out) by itself anyway.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field

from pitcrew.api.policy import StragglerSpec
from pitcrew.core.job_ledger import Progress


def slow_nodes(progress: Progress, spec: Mapping[str, StragglerSpec]) -> dict[str, float]:
    """The nodes this report names slower than their usual time by their policy's
    threshold, with how many times their usual time they took. ``spec``: the job's
    nodes that may be judged (in service, stragglers enabled), each with its policy's
    setting."""
    median = progress.step_seconds
    if median is None:
        return {}
    found = {}
    for rank in progress.slowest:
        setting = spec.get(rank.node)
        if setting is None or not setting.enabled:
            continue
        usual = median if rank.usual_seconds is None else rank.usual_seconds
        if rank.step_seconds >= usual * (1 + setting.slower_than_median_percent / 100):
            found[rank.node] = rank.step_seconds / usual
    return found


def verdict(job: str, ratio: float, reports: int) -> str:
    """The sentence a straggler is taken out with."""
    return (
        f"the straggler of job {job}: {ratio:.2f}x its usual step time "
        f"in {reports} reports in a row"
    )


@dataclass
class _Streak:
    reports: int
    ratio: float


@dataclass
class Streaks:
    """Per job, the nodes slow in every report since their streak began."""

    jobs: dict[str, tuple[datetime.datetime, dict[str, _Streak]]] = field(default_factory=dict)

    def observe(
        self, job: str, progress: Progress | None, spec: Mapping[str, StragglerSpec]
    ) -> None:
        """Count one job's latest report (once: the same report seen again is no news).
        A report without step times neither extends nor breaks a streak."""
        if progress is None or progress.step_seconds is None:
            return
        seen, streaks = self.jobs.get(job, (None, {}))
        if seen is not None and progress.time <= seen:
            return
        slow = slow_nodes(progress, spec)
        self.jobs[job] = (
            progress.time,
            {
                node: _Streak((streaks[node].reports if node in streaks else 0) + 1, ratio)
                for node, ratio in slow.items()
            },
        )

    def keep(self, jobs: set[str]) -> None:
        """Forget the jobs that are over."""
        for job in set(self.jobs) - jobs:
            del self.jobs[job]

    def stragglers(self, spec: Mapping[str, StragglerSpec]) -> dict[str, str]:
        """The nodes slow for at least their policy's ``consecutiveReports``, each with
        the sentence the lifecycle takes it out with. Only nodes still in ``spec``."""
        found: dict[str, str] = {}
        for job, (_, streaks) in sorted(self.jobs.items()):
            for node, streak in streaks.items():
                setting = spec.get(node)
                if setting is None or node in found:
                    continue
                if streak.reports >= setting.consecutive_reports:
                    found[node] = verdict(job, streak.ratio, streak.reports)
        return found

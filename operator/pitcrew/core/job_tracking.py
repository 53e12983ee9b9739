"""Which training jobs get metric series of their own: a bounded, stable set.

Any user who may create pods can label them ``pitcrew.dev/job=<anything>``, and
each job name would become new ``pitcrew_job_*`` series: without a bound, one
tenant can exhaust Prometheus. So at most ``limit`` jobs are tracked by name;
the others are summed as ``training_job="other"``.

The set is sticky: a tracked job keeps its series while it lives (a counter
that moved between a name and ``other`` would show a reset and a jump). Free
places go to the largest jobs first (by GPUs), and a job at least
:data:`DISPLACES` times the size of the smallest tracked one takes that one's
place, so a new 1,000-GPU run is never hidden behind 200 old one-GPU notebooks,
while two jobs of similar size never trade places tick after tick.
"""

from __future__ import annotations

from collections.abc import Mapping

OTHER = "other"
DISPLACES = 2


def tracked(current: frozenset[str], gpus: Mapping[str, int], *, limit: int) -> frozenset[str]:
    """The jobs to track now, from those tracked before and every live job's GPUs."""
    kept = {job for job in current if job in gpus}
    waiting = sorted((job for job in gpus if job not in kept), key=lambda j: (-gpus[j], j))
    for job in waiting:
        if len(kept) < limit:
            kept.add(job)
            continue
        smallest = min(kept, key=lambda j: (gpus[j], j), default=None)
        if smallest is None or gpus[job] < DISPLACES * max(1, gpus[smallest]):
            break  # waiting is sorted: no later job displaces either
        kept.discard(smallest)
        kept.add(job)
    return frozenset(kept)

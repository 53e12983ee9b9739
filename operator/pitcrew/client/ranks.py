"""Every rank's compute time, judged against the rank's own usual pace, for one report.

A synchronous job runs at the pace of its slowest rank, so the wall time of a step
is the same on every rank: what differs is each rank's own compute (the work before
any collective waits on the others). Ranks are not alike, though: a pipeline's first
and last stages embed and project, MoE expert ranks get more tokens or fewer. A rank
that was always 30 % slower than the job's median is the job's shape, not a fault,
and judging it against the median took healthy nodes out. So each rank is judged
against its **own usual pace**: its compute divided by the median of its peers (the
ranks of its role where the job names roles, all ranks otherwise), learned over the
gatherings (:class:`Paces`). Rank 0 reports the job's median and the nodes furthest
behind their usual pace, each with the time it would have taken at that pace; the
operator (:mod:`pitcrew.core.stragglers`) decides whether one is a straggler.

A rank keeps two numbers (its usual pace and how many gatherings taught it), so rank 0
holds two floats per rank, however long the job runs.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from pitcrew.api.policy import MIN_SLOWER_PERCENT
from pitcrew.client.progress import Timing
from pitcrew.core.job_ledger import RankTime

KEEP = 4
"""Nodes a report names: enough that a straggler is among them when two nodes are slow."""
WARM_UP = 1
"""Gatherings that teach nothing: the first steps compile, fill caches and allocators."""
LEARN = 3
"""Gatherings a rank without a role learns its usual pace from before it is judged."""
HORIZON = 16
"""After :data:`LEARN`, a gathering counts 1/HORIZON in the usual pace: a slow drift
(MoE routing shifting over training) is followed, one gathering's noise is not."""
LEARN_SLOWER = MIN_SLOWER_PERCENT / 100
"""A gathering slower than the rank's usual pace by more than this teaches nothing: no
policy judges less, so a rank that became a straggler is found however long its
policy wants it to stay slow, and never becomes its own usual."""


class Paces:
    """Rank 0's memory of every rank's usual pace over one run of the job.

    ``roles``: each rank's role (a pipeline stage, an expert group), or empty when the
    job names none. Ranks of one role are meant to keep one pace, so a rank with a role
    starts at its peers' pace (usual 1.0) and is judged from the first gathering after
    :data:`WARM_UP`: one slow from the start is found. A rank without a role has only
    its own history: it is judged once :data:`LEARN` gatherings taught its usual pace,
    and one slow from the job's start is, to it, usual."""

    def __init__(self, nodes: Sequence[str], roles: Sequence[str] = ()) -> None:
        if roles and len(roles) != len(nodes):
            raise ValueError(f"{len(roles)} roles for {len(nodes)} ranks")
        self.nodes = list(nodes)
        self.roles = list(roles) if roles else [""] * len(nodes)
        self.usual = [1.0] * len(nodes)
        self.learned = [LEARN if role else 0 for role in self.roles]
        self.gatherings = 0

    def judge(self, seconds: Sequence[float], *, keep: int = KEEP) -> Timing:
        """The median rank's compute, and the ``keep`` nodes furthest behind their usual
        pace, furthest first (each at its rank furthest behind, with the time that rank
        takes at its usual pace). Ranks without a node name are left out of the list;
        ranks not yet judged too. Then the gathering teaches each rank's usual pace."""
        if len(seconds) != len(self.nodes) or not seconds:
            raise ValueError(f"{len(seconds)} step times for {len(self.nodes)} ranks")
        self.gatherings += 1
        peers = _medians(seconds, self.roles)
        behind: dict[str, tuple[float, RankTime]] = {}
        ranks = zip(self.nodes, self.roles, seconds, strict=True)
        for rank, (node, role, value) in enumerate(ranks):
            median = peers[role]
            if median <= 0 or self.gatherings <= WARM_UP:
                continue
            pace = value / median
            if node and self.learned[rank] >= LEARN:
                ratio = pace / self.usual[rank]
                if ratio > behind.get(node, (-1.0, None))[0]:
                    behind[node] = (ratio, RankTime(node, value, self.usual[rank] * median))
            self._learn(rank, pace)
        furthest = sorted(behind.values(), key=lambda entry: (-entry[0], entry[1].node))
        return statistics.median(seconds), tuple(time for _, time in furthest[:keep])

    def _learn(self, rank: int, pace: float) -> None:
        learned, usual = self.learned[rank], self.usual[rank]
        if learned < LEARN:
            self.usual[rank] = usual + (pace - usual) / (learned + 1)  # the plain mean
        elif pace <= usual * (1 + LEARN_SLOWER):
            self.usual[rank] = usual + (pace - usual) / HORIZON
        else:
            return
        self.learned[rank] = learned + 1


def _medians(seconds: Sequence[float], roles: Sequence[str]) -> dict[str, float]:
    """Each role's median compute (the role ``""``: the ranks without one)."""
    by_role: dict[str, list[float]] = {}
    for role, value in zip(roles, seconds, strict=True):
        by_role.setdefault(role, []).append(value)
    return {role: statistics.median(values) for role, values in by_role.items()}

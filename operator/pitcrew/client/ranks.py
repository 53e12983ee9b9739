"""Every rank's step time, summed up for one progress report: the median, the slowest.

A synchronous job runs at the pace of its slowest rank, so the wall time of a step
is the same on every rank: what differs is each rank's own compute (the forward
pass, before any collective waits on the others). Rank 0 gathers that, one number
per rank, and reports the median and the few slowest nodes; the operator
(:mod:`pitcrew.core.stragglers`) decides whether one of them is a straggler.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from pitcrew.core.job_ledger import RankTime

KEEP = 4
"""Nodes a report names: enough that a straggler is among them when two nodes are slow."""


def summarize(
    seconds: Sequence[float], nodes: Sequence[str], *, keep: int = KEEP
) -> tuple[float, tuple[RankTime, ...]]:
    """The median rank's step time, and the ``keep`` slowest nodes (each at its slowest
    rank's time), slowest first. Ranks without a node name are left out of the list."""
    if len(seconds) != len(nodes) or not seconds:
        raise ValueError(f"{len(seconds)} step times for {len(nodes)} ranks")
    per_node: dict[str, float] = {}
    for node, value in zip(nodes, seconds, strict=True):
        if node:
            per_node[node] = max(value, per_node.get(node, 0.0))
    slowest = sorted(per_node.items(), key=lambda item: (-item[1], item[0]))[:keep]
    return statistics.median(seconds), tuple(RankTime(n, s) for n, s in slowest)

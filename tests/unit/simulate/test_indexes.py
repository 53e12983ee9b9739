"""The simulator's incremental indexes agree with a full rescan of the fleet.

The launcher's restart looks only at the job's nodes the world keeps as lacking
(``World.doubtful``), and the job keeps its ranks without a node as a set: each is
checked here against a scan of every rank, at every restart of whole simulations
on the Llama 3 mix (evictions, hosts down, maintenance, stragglers, lemons,
spares reserved for the job), for every kind of cluster.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from pitcrew.core.evidence import worst_finding
from pitcrew.simulate.control import Operator, finding
from pitcrew.simulate.job import Job
from pitcrew.simulate.node import Node
from pitcrew.simulate.run import run
from pitcrew.simulate.settings import (
    DEFAULTS,
    Contender,
    Settings,
    baselines,
    default_spec,
    with_spares,
)
from pitcrew.simulate.world import World

BUSY = Settings(nodes=140, days=20, seed=5, lemons=4, stragglers_per_node_year=2.0)
"""A 135-node job with a few lemons and many stragglers: every path of a restart."""


def test_the_launcher_sees_every_node_that_refuses_its_pod_and_every_rank_without_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    restarts = 0
    doubtful = World.doubtful

    def checked(world: World, job: Job) -> list[Node]:
        nonlocal restarts
        restarts += 1
        found = doubtful(world, job)
        refused = [n for n in job.ranks if n is not None and not world.keeps(n)]
        assert {n.index for n in refused} <= {n.index for n in found}
        assert [job.rank_of[n.index] for n in found] == sorted(job.rank_of[n.index] for n in found)
        assert job.pending() == [r for r, n in enumerate(job.ranks) if n is None]
        return found

    monkeypatch.setattr(World, "doubtful", checked)
    for contender in (*baselines(), Contender(DEFAULTS, with_spares(default_spec(), 3))):
        run(BUSY, contender)
    assert restarts > 50


def test_a_nodes_finding_read_once_per_status_is_the_one_its_status_has(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hung job's check reads every node's worst finding, kept with the status it was
    read from: at every check each is what a fresh read of the node's status finds."""
    checks = found = 0
    hang_check = Operator._hang_check

    def checked(operator: Operator, epoch: int, since: float) -> None:
        nonlocal checks, found
        checks += 1
        for node in operator.world.nodes:
            assert finding(node) == worst_finding(node.status)
            found += finding(node) is not None
        hang_check(operator, epoch, since)

    monkeypatch.setattr(Operator, "_hang_check", checked)
    hangs = replace(BUSY.realism, hang_share=0.9)
    run(replace(BUSY, realism=hangs), Contender(DEFAULTS, with_spares(default_spec(), 3)))
    assert checks > 10
    assert found > 0

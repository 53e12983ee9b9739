"""The ``torch.distributed`` helper with two real ranks (gloo, two processes): one
rank's forward pass is slow, and rank 0's reports name its node as the slowest."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import torch.multiprocessing as mp

from pitcrew.client.progress import parse
from support.two_ranks import SLOW_SECONDS, STEPS, rank


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_slow_ranks_node_is_named_the_slowest(tmp_path: Path) -> None:
    out = tmp_path / "patches"
    mp.spawn(rank, args=(free_port(), out), nprocs=2, join=True)
    reports = [
        parse(next(iter(json.loads(line).values()))) for line in out.read_text().splitlines()
    ]
    timed = [r for r in reports if r.step_seconds is not None]
    # Gathered after the first 10 steps, then every step (min_interval 0): each
    # gathering in exactly one report.
    assert len(timed) == STEPS - 10 + 1
    for report in timed:
        slow, fast = report.slowest
        assert (slow.node, fast.node) == ("node-1", "node-0")
        assert slow.step_seconds >= SLOW_SECONDS > fast.step_seconds
        # The median of two ranks lies between them.
        assert fast.step_seconds <= report.step_seconds <= slow.step_seconds
    assert reports[-1].step == STEPS - 1

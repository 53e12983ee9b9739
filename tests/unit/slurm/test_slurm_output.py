"""Reading Slurm's own tools: real ``sinfo --json`` output of Slurm 22.05 (captured
from the daemons the e2e tests run, data/README.md), the list-shaped ``state`` that
``scontrol --json`` prints from 23.02 on, ``squeue`` lines, and the node names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pitcrew.api.policy import SlurmSpec
from pitcrew.core.slurm import (
    MalformedSlurmOutputError,
    parse_jobs,
    parse_nodes,
    slurm_name,
)

DATA = Path(__file__).parent / "data"


STATES = [
    ("idle", ("IDLE",), False, False, False),
    ("allocated", ("ALLOCATED",), True, False, False),
    ("draining", ("ALLOCATED", "DRAIN"), True, True, True),
    ("drained", ("IDLE", "DRAIN"), False, True, True),
    ("down", ("DOWN",), False, False, True),
    # Just after slurmctld restarts, before slurmd registers: its job may run on.
    ("restarted", ("UNKNOWN", "DRAIN"), True, True, True),
]
"""Each state captured from real daemons (data/README.md): its flags, busy, drained, out."""


@pytest.mark.parametrize(
    "capture",
    ["sinfo-json-{}.json", "scontrol-json-24.11-{}.json"],
    ids=["22.05-sinfo", "24.11-scontrol"],
)
@pytest.mark.parametrize("expected", STATES, ids=[s[0] for s in STATES])
def test_node_states_of_slurm_22_05_and_24_11(
    capture: str, expected: tuple[str, tuple[str, ...], bool, bool, bool]
) -> None:
    """22.05's ``sinfo --json`` (one lower-case state, flags apart) and 24.11's
    ``scontrol --json show node`` (a list of upper-case words) read the same."""
    name, states, busy, drained, out = expected
    read = parse_nodes((DATA / capture.format(name)).read_text())
    assert read.problems == ()
    node = read.items["slurm-node-0"]
    assert node.states == states
    assert (node.busy, node.drained, node.out) == (busy, drained, out)
    assert read.items["slurm-node-1"].states == ("UNKNOWN" if name == "restarted" else "IDLE",)


@pytest.mark.parametrize(
    "capture", ["sinfo-json-{}.json", "scontrol-json-24.11-{}.json"], ids=["22.05", "24.11"]
)
def test_a_reason_with_spaces_and_a_colon_is_read_whole_and_owned(capture: str) -> None:
    node = parse_nodes((DATA / capture.format("reason-with-spaces")).read_text()).items[
        "slurm-node-0"
    ]
    assert node.reason == "pitcrew: Xid 79 on GPU 3"
    assert node.pitcrews
    drained = parse_nodes((DATA / capture.format("drained")).read_text()).items["slurm-node-0"]
    assert drained.reason == "pitcrew-maintenance"
    assert not drained.pitcrews  # not Pitcrew's prefix: a person's reason


def test_the_jobs_squeue_24_11_prints_for_the_operator() -> None:
    read = parse_jobs((DATA / "squeue-24.11-running.txt").read_text())
    assert read.items == (("1", '{"step":7}'),)
    assert read.problems == ()


def test_one_malformed_node_is_flagged_and_the_others_still_read() -> None:
    document = json.loads((DATA / "sinfo-json-draining.json").read_text())
    document["nodes"].insert(0, {"name": "gpu[1-64]", "state": "idle"})
    document["nodes"].insert(1, {"name": "n9", "state": 7})
    read = parse_nodes(json.dumps(document))
    assert set(read.items) == {"slurm-node-0", "slurm-node-1"}
    assert read.problems[0].startswith("node 1 of 4: no plain node name")
    assert read.problems[1].startswith("node 2 of 4: n9: unreadable state")
    # n9 is a node of unknown state, not one Slurm does not list; the hostlist entry
    # names no node, so no name missing from the read is known to be absent.
    assert list(read.failed) == ["n9"]
    assert not read.whole


@pytest.mark.parametrize("text", ["", "not json", "[]", '{"nodes": {}}'])
def test_output_that_is_no_node_list_is_an_error(text: str) -> None:
    with pytest.raises(MalformedSlurmOutputError):
        parse_nodes(text)


def test_squeue_lines_with_comments_and_a_bad_line() -> None:
    text = (
        '41|{"step": 120, "time": "2026-12-05T01:00:00Z"}\n'
        "42|(null)\n"
        "oops\n"
        "43_7|a|comment|with bars\n"
    )
    read = parse_jobs(text)
    assert read.items == (
        ("41", '{"step": 120, "time": "2026-12-05T01:00:00Z"}'),
        ("42", ""),
        ("43_7", "a|comment|with bars"),
    )
    assert read.problems == ("squeue line 3: no job id in 'oops'",)


def pod(
    namespace: str, name: str, labels: dict[str, str], phase: str = "Running"
) -> dict[str, object]:
    return {
        "metadata": {"namespace": namespace, "name": name, "labels": labels},
        "status": {"phase": phase},
    }


LABEL = "slinky.slurm.net/pod-hostname"


def test_the_slurm_name_comes_from_the_slurmd_pod_in_the_slurm_namespace() -> None:
    spec = SlurmSpec()
    pods = [
        pod("team-a", "trainer-0", {LABEL: "victim-node"}),  # a tenant's pod: ignored
        pod("slurm", "compute-7", {LABEL: "compute-7"}),
    ]
    assert slurm_name("gpu-node-7", pods, spec) == ("compute-7", "slurm/compute-7")
    assert slurm_name("gpu-node-7", pods[:1], spec) == ("gpu-node-7", "")


def test_a_name_that_would_touch_many_slurm_nodes_is_refused() -> None:
    spec = SlurmSpec()
    for value in ("compute-[1-64]", "a,b", "a b", "-x"):
        name, key = slurm_name("gpu-node-7", [pod("slurm", "c", {LABEL: value})], spec)
        assert name == ""
        assert key == "slurm/c"

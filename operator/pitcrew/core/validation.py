"""ValidationRun planning: which nodes to validate now, how to pair them, whom to blame.

A pure function of the run, the nodes it selects and the evidence so far,
like :mod:`pitcrew.core.lifecycle`. A run takes at most ``maxConcurrentNodes``
nodes out of service at a time, counting every node it holds: those
validating and those that passed and wait for their pair test.

1. **Single-node validation**, rolling: the node lifecycle takes a requested
   node out of service when it is idle, runs the probe Job (the run's suite)
   and keeps it in Validating while the request stands; a node whose probe
   fails goes down the usual quarantine path.
2. **Multi-node all-reduce in batches**: once the budget is full of nodes
   that passed (or nothing is left to validate), they are paired among
   themselves: disjoint pairs (``pairwise``) or neighbours on a ring
   (``ring``), within or across the topology groups named by
   ``topologyKey`` (``within`` never pairs across a group; a node alone in
   its group is reported untested). A failing pair proves only that *one* of
   two nodes (or the fabric between them) is bad, so each node of a failing
   pair is re-paired once with a known-good partner (from any batch): a node
   that fails again is blamed, a node that passes is cleared. Blamed nodes
   fail the run; their failing ``nccl-pair`` result is written to their
   GPUNode as the awaited probe report before they are released, so the
   lifecycle quarantines them. Judged nodes are released and the next nodes
   start.

When every node has a result the run ends Succeeded, or Failed if any node
failed or could not be tested (a pair that never reported, a node that
disappeared, the run's timeout).
"""

from __future__ import annotations

import datetime
import json
import statistics
import zlib
from dataclasses import dataclass, field

from gpuhealth.report import CheckStatus
from pitcrew.api.gpunode import ChecksStatus, Phase
from pitcrew.api.policy import NcclPairing
from pitcrew.api.validationrun import (
    BusBandwidth,
    NodeResult,
    NodeResultStatus,
    PairingScope,
    PairResult,
    RunPhase,
    ValidationRunSpec,
    ValidationRunStatus,
)

PAIR_NICS = 1
"""Pair tests run one rank per node (GPU 0 and its NIC): the floor is the per-NIC floor."""
PENDING, RUNNING = NodeResultStatus.PENDING, NodeResultStatus.RUNNING
PASS, FAIL, ERROR = NodeResultStatus.PASS, NodeResultStatus.FAIL, NodeResultStatus.ERROR
DONE = (PASS, FAIL, ERROR)
ELIGIBLE = (Phase.HEALTHY, Phase.SPARE, Phase.VALIDATING)


@dataclass(frozen=True)
class Candidate:
    name: str
    phase: Phase
    group: str
    """Value of the run's topology label (rack, leaf switch)."""
    probe: ChecksStatus | None = None
    probe_job: str = ""
    """The probe Job the node's validation waits for (its GPUNode's ``probeJob``)."""
    validating_since: datetime.datetime | None = None
    """When its current validation began (operator clock), if it is Validating."""


@dataclass(frozen=True)
class RunPlan:
    status: ValidationRunStatus
    requested: frozenset[str] = frozenset()
    """Nodes that must carry the run's request annotation now (others must not)."""
    start_pairs: tuple[PairResult, ...] = ()
    blame: dict[str, str] = field(default_factory=dict)
    """node -> message of the failing pair test that blames it."""


def pair_name(a: str, b: str) -> str:
    return f"{a}--{b}"


def parse_pair_report(text: str) -> tuple[float | None, str]:
    """The pair probe's report, as it leaves it in its pod's termination message:
    ``{"busbwGbps": 48.1}`` or ``{"error": "..."}``. Anything else is an error: the
    pod belongs to a node under test, and the operator trusts only a number from it."""
    try:
        report = json.loads(text)
    except ValueError:
        return None, f"unreadable pair report: {text[:200]!r}"
    if not isinstance(report, dict):
        return None, f"unreadable pair report: {text[:200]!r}"
    busbw = report.get("busbwGbps")
    if isinstance(busbw, int | float) and not isinstance(busbw, bool) and busbw >= 0:
        return float(busbw), ""
    return None, str(report.get("error") or f"pair report without busbwGbps: {text[:200]!r}")


def pair_verdict(
    pair: PairResult, *, busbw_gbps: float | None, floor_gbps: float | None, error: str = ""
) -> PairResult:
    """Judge a pair's measured bus bandwidth against the floor of its nodes' GPU model
    (the operator judges, never the probe). No floor (an unknown model) is no verdict."""
    if busbw_gbps is None:
        return pair.model_copy(update={"result": ERROR, "message": error[:1024]})
    if floor_gbps is None:
        return pair.model_copy(
            update={
                "result": ERROR,
                "busbw_gbps": round(busbw_gbps, 1),
                "message": "unknown GPU model: no inter-node floor to judge against",
            }
        )
    ok = busbw_gbps >= floor_gbps
    return pair.model_copy(
        update={
            "result": PASS if ok else FAIL,
            "busbw_gbps": round(busbw_gbps, 1),
            "message": f"{busbw_gbps:.1f} GB/s {'>=' if ok else '<'} floor {floor_gbps:g} GB/s",
        }
    )


def _single_result(node: NodeResult, candidate: Candidate) -> NodeResult:
    probe = candidate.probe
    if candidate.phase in (
        Phase.QUARANTINED,
        Phase.DRAINING,
        Phase.REMEDIATING,
        Phase.RETIRED,
        Phase.SUSPECT,
    ):
        return node.model_copy(
            update={"result": FAIL, "message": f"validation failed: node is {candidate.phase}"}
        )
    # The report must be the one of the probe started for this run: matched by the
    # Job's name, and that validation began after the run asked for the node (both
    # times are the operator's own, never the node's clock).
    if (
        probe is None
        or node.started_at is None
        or not candidate.probe_job
        or probe.job != candidate.probe_job
        or candidate.validating_since is None
        or candidate.validating_since < node.started_at
    ):
        return node
    failing = [c for c in probe.results if c.status is CheckStatus.FAIL]
    if not failing and any(c.status is CheckStatus.ERROR for c in probe.results):
        return node  # a probe that could not run is no verdict: the lifecycle retries it
    busbw = next((c.observed for c in probe.results if c.name == "nccl-allreduce"), None)
    if failing:
        return node.model_copy(
            update={
                "result": FAIL,
                "busbw_gbps": busbw,
                "message": "; ".join(sorted({c.message or c.name for c in failing}))[:1024],
            }
        )
    return node.model_copy(
        update={"result": PASS, "busbw_gbps": busbw, "message": f"{probe.suite} suite passed"}
    )


def _pairs(nodes: list[Candidate], spec: ValidationRunSpec) -> list[tuple[str, str]]:
    """First-round partners. ``within``: each topology group is paired on its own, so
    no pair crosses a group; ``across``: groups are interleaved so that neighbours
    come from different groups."""
    ordered = sorted(nodes, key=lambda c: (c.group, c.name))
    groups: dict[str, list[str]] = {}
    for c in ordered:
        groups.setdefault(c.group, []).append(c.name)
    ring = spec.nccl_pairing is NcclPairing.RING
    if spec.pairing_scope is PairingScope.WITHIN:
        return [pair for members in groups.values() for pair in _pair_up(members, ring=ring)]
    interleaved: list[str] = []
    queues = list(groups.values())
    while any(queues):
        for queue in queues:
            if queue:
                interleaved.append(queue.pop(0))
    return _pair_up(interleaved, ring=ring)


def _pair_up(names: list[str], *, ring: bool) -> list[tuple[str, str]]:
    if len(names) < 2:
        return []
    if ring and len(names) > 2:
        return [(names[i], names[(i + 1) % len(names)]) for i in range(len(names))]
    pairs = [(names[i], names[i + 1]) for i in range(0, len(names) - 1, 2)]
    if len(names) % 2:
        pairs.append((names[-1], names[0]))  # the odd one out shares node 0
    return pairs


def _begin(
    status: ValidationRunStatus, candidates: list[Candidate], now: datetime.datetime
) -> ValidationRunStatus:
    nodes = [
        NodeResult(node=c.name)
        if c.phase in ELIGIBLE
        else NodeResult(node=c.name, result=ERROR, message=f"not validated: node is {c.phase}")
        for c in sorted(candidates, key=lambda c: c.name)
    ]
    return status.model_copy(update={"phase": RunPhase.RUNNING, "started_at": now, "nodes": nodes})


def _advance(node: NodeResult, candidate: Candidate | None) -> NodeResult:
    if candidate is None:
        if node.result in DONE:
            return node
        return node.model_copy(update={"result": ERROR, "message": "node disappeared"})
    return _single_result(node, candidate) if node.result is RUNNING else node


def _record_singles(
    status: ValidationRunStatus, by_name: dict[str, Candidate]
) -> ValidationRunStatus:
    """Record the single-node results that came in."""
    return status.model_copy(
        update={"nodes": [_advance(n, by_name.get(n.node)) for n in status.nodes]}
    )


def _start_singles(
    spec: ValidationRunSpec, status: ValidationRunStatus, now: datetime.datetime, *, busy: int
) -> ValidationRunStatus:
    """Start pending nodes, rolling: ``busy`` nodes of the run are out of service already
    (waiting for or in a pair test) and count against ``maxConcurrentNodes`` like the
    ones validating."""
    nodes = list(status.nodes)
    out = busy + sum(1 for n in nodes if n.result is RUNNING)
    for index, node in enumerate(nodes):
        if node.result is PENDING and out < spec.max_concurrent_nodes:
            nodes[index] = node.model_copy(update={"result": RUNNING, "started_at": now})
            out += 1
    return status.model_copy(update={"nodes": nodes})


def _apply_verdicts(
    nodes: list[NodeResult], verdicts: dict[str, tuple[NodeResultStatus, str, str]]
) -> list[NodeResult]:
    final = []
    for node in nodes:
        verdict = verdicts.get(node.node)
        if verdict is None or node.result is not PASS or node.partner:
            final.append(node)
            continue
        result, partner, message = verdict
        final.append(
            node.model_copy(
                update={"result": result, "partner": partner or "-", "message": message}
            )
        )
    return final


def plan(
    *,
    spec: ValidationRunSpec,
    status: ValidationRunStatus,
    candidates: list[Candidate],
    now: datetime.datetime,
) -> RunPlan:
    """The run's next step. Nodes are out of service ``maxConcurrentNodes`` at a time,
    counting those that passed and wait for their pair test: when the budget is full
    of them (or nothing is left to validate) they are paired as a batch, judged, and
    released, and the next nodes start."""
    if status.phase in (RunPhase.SUCCEEDED, RunPhase.FAILED):
        return RunPlan(status=status)
    by_name = {c.name: c for c in candidates}
    if status.phase is RunPhase.PENDING or status.started_at is None:
        status = _begin(status, candidates, now)
    assert status.started_at is not None
    if now - status.started_at > spec.timeout:
        return RunPlan(status=_timed_out(spec, status, now))

    pairs = list(status.pairs)
    open_nodes = {n for p in pairs if p.result in (PENDING, RUNNING) for n in p.nodes}
    blame: dict[str, str] = {}
    if not open_nodes and pairs:
        verdicts, repairs = _judge(pairs)
        if repairs:
            retests = [
                PairResult(name=pair_name(a, b), nodes=[a, b], attempt=2) for a, b in repairs
            ]
            status = status.model_copy(update={"pairs": [*pairs, *retests]})
            held = _waiting(status) | {n for p in retests for n in p.nodes}
            held |= {n.node for n in status.nodes if n.result is RUNNING}
            return RunPlan(status=status, requested=frozenset(held), start_pairs=tuple(retests))
        before = {n.node: n.result for n in status.nodes}
        nodes = _apply_verdicts(list(status.nodes), verdicts)
        blame = {
            n.node: n.message
            for n in nodes
            if n.result is FAIL and before.get(n.node) is PASS and n.node in verdicts
        }
        status = status.model_copy(update={"nodes": nodes})
    status = _record_singles(status, by_name)
    waiting = _waiting(status)
    status = _start_singles(spec, status, now, busy=len(waiting | open_nodes))
    running = {n.node for n in status.nodes if n.result is RUNNING}
    pending = any(n.result is PENDING for n in status.nodes)
    start: tuple[PairResult, ...] = ()
    batch_ready = not pending or len(waiting) >= min(2, spec.max_concurrent_nodes)
    if not open_nodes and not running and waiting and batch_ready:
        status, start, lonely = _pair_batch(spec, status, by_name, waiting)
        status = status.model_copy(update={"nodes": _apply_verdicts(list(status.nodes), lonely)})
        waiting = _waiting(status)
        if not start:
            # Nothing to pair in this batch: its nodes are judged; the next ones start.
            status = _start_singles(spec, status, now, busy=len(waiting))
            running = {n.node for n in status.nodes if n.result is RUNNING}
            pending = any(n.result is PENDING for n in status.nodes)
    if not pending and not running and not waiting and not start and not open_nodes:
        return RunPlan(status=_finish(status, now), blame=blame)
    held = running | waiting | open_nodes | {n for p in start for n in p.nodes}
    return RunPlan(status=status, requested=frozenset(held), start_pairs=start, blame=blame)


def _waiting(status: ValidationRunStatus) -> set[str]:
    """Nodes that passed on their own and have no pair verdict yet: still held."""
    return {n.node for n in status.nodes if n.result is PASS and not n.partner}


def _pair_batch(
    spec: ValidationRunSpec,
    status: ValidationRunStatus,
    by_name: dict[str, Candidate],
    waiting: set[str],
) -> tuple[
    ValidationRunStatus, tuple[PairResult, ...], dict[str, tuple[NodeResultStatus, str, str]]
]:
    """First-round pair tests among the waiting nodes; verdicts for the ones that have
    no partner (alone in their topology group, or the only node of the run)."""
    batch = [by_name[n] for n in sorted(waiting) if n in by_name]
    new = [PairResult(name=pair_name(a, b), nodes=[a, b]) for a, b in _pairs(batch, spec)]
    if len(batch) == 1:
        # The last node of a run whose earlier nodes were paired and released: it is
        # tested with one of them, a known-good partner (held again for the test).
        partner = _known_good_partner(spec, status, by_name, batch[0])
        if partner:
            new = [
                PairResult(name=pair_name(batch[0].name, partner), nodes=[batch[0].name, partner])
            ]
    paired = {n for p in new for n in p.nodes}
    lonely: dict[str, tuple[NodeResultStatus, str, str]] = {}
    alone = len(status.nodes) == 1
    for name in sorted(waiting - paired):
        if alone:
            lonely[name] = (PASS, "-", "passed; the only node of the run, nothing to pair")
        else:
            group = by_name[name].group if name in by_name else ""
            lonely[name] = (
                ERROR,
                "-",
                f"no partner in its {spec.topology_key or 'topology'} group {group!r}: "
                "the multi-node test could not run",
            )
    pairs = [*status.pairs, *new]
    return status.model_copy(update={"pairs": pairs}), tuple(new), lonely


def _known_good_partner(
    spec: ValidationRunSpec,
    status: ValidationRunStatus,
    by_name: dict[str, Candidate],
    node: Candidate,
) -> str:
    """A node that passed its own pair test, from the scope the run asks for."""
    good = sorted(
        n.node
        for n in status.nodes
        if n.result is PASS and n.partner and n.node != node.name and n.node in by_name
    )
    same = [g for g in good if by_name[g].group == node.group]
    other = [g for g in good if by_name[g].group != node.group]
    choices = same if spec.pairing_scope is PairingScope.WITHIN else other or same
    return choices[zlib.crc32(node.name.encode()) % len(choices)] if choices else ""


def _timed_out(
    spec: ValidationRunSpec, status: ValidationRunStatus, now: datetime.datetime
) -> ValidationRunStatus:
    # A node whose pair test never reported is not validated: a run whose pairs
    # stayed silent (a refused write, a hung pod) must end Failed, never Succeeded.
    silent = {n: p.name for p in status.pairs if p.result in (PENDING, RUNNING) for n in p.nodes}
    nodes = []
    for n in status.nodes:
        if n.node in silent:
            message = f"pair test {silent[n.node]} did not report within {spec.timeout}"
            nodes.append(n.model_copy(update={"result": ERROR, "message": message}))
        elif n.result in DONE and (n.result is not PASS or n.partner):
            nodes.append(n)
        elif n.result is PASS:
            message = f"passed alone; no pair test within {spec.timeout}"
            nodes.append(n.model_copy(update={"result": ERROR, "message": message}))
        else:
            message = f"not finished within {spec.timeout}"
            nodes.append(n.model_copy(update={"result": ERROR, "message": message}))
    return _finish(status.model_copy(update={"nodes": nodes}), now)


def _judge(
    pairs: list[PairResult],
) -> tuple[dict[str, tuple[NodeResultStatus, str, str]], list[tuple[str, str]]]:
    """Verdict per node from the pair tests, or the re-pairings still needed."""
    verdicts: dict[str, tuple[NodeResultStatus, str, str]] = {}
    first = [p for p in pairs if p.attempt == 1]
    good = sorted({n for p in first if p.result is PASS for n in p.nodes})
    second = {p.nodes[0]: p for p in pairs if p.attempt == 2}
    suspects: dict[str, PairResult] = {}
    for pair in first:
        for node in pair.nodes:
            if pair.result is PASS:
                verdicts.setdefault(
                    node,
                    (
                        PASS,
                        _other(pair, node),
                        f"all-reduce with {_other(pair, node)}: {pair.busbw_gbps} GB/s",
                    ),
                )
            elif node not in good:
                suspects[node] = pair
    repairs: list[tuple[str, str]] = []
    for node, pair in sorted(suspects.items()):
        retest = second.get(node)
        partners = [g for g in good if g not in pair.nodes]
        if retest is not None:
            if retest.result is PASS:
                verdicts[node] = (
                    PASS,
                    retest.nodes[1],
                    f"cleared by a known-good partner {retest.nodes[1]}",
                )
            else:
                verdicts[node] = (
                    FAIL,
                    retest.nodes[1],
                    f"all-reduce failed with {_other(pair, node)} and with "
                    f"known-good {retest.nodes[1]}: {retest.message}",
                )
        elif partners:
            repairs.append((node, partners[zlib.crc32(node.encode()) % len(partners)]))
        else:
            verdicts[node] = (
                FAIL,
                _other(pair, node),
                f"all-reduce with {_other(pair, node)} failed and no known-good "
                f"partner was left to re-test: {pair.message}",
            )
    return verdicts, repairs


def _other(pair: PairResult, node: str) -> str:
    return pair.nodes[1] if pair.nodes[0] == node else pair.nodes[0]


def _finish(status: ValidationRunStatus, now: datetime.datetime) -> ValidationRunStatus:
    failed = sorted(n.node for n in status.nodes if n.result in (FAIL, ERROR))
    values = [n.busbw_gbps for n in status.nodes if n.busbw_gbps is not None]
    busbw = (
        BusBandwidth(
            min_gbps=min(values), median_gbps=statistics.median(values), max_gbps=max(values)
        )
        if values
        else None
    )
    return status.model_copy(
        update={
            "phase": RunPhase.FAILED if failed else RunPhase.SUCCEEDED,
            "completed_at": now,
            "failed_nodes": failed,
            "busbw": busbw,
        }
    )

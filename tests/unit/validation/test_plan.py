"""ValidationRun planning: rolling single-node validation, pairing, blame."""

from __future__ import annotations

import datetime

from gpuhealth.report import CheckResult, CheckStatus, FaultClass
from pitcrew.api.gpunode import ChecksStatus, Phase
from pitcrew.api.validationrun import (
    NodeResultStatus,
    PairResult,
    RunPhase,
    ValidationRunSpec,
    ValidationRunStatus,
)
from pitcrew.core.validation import Candidate, pair_verdict, parse_pair_report, plan

T0 = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
SELECTOR = {"matchLabels": {"rack": "r1"}}
PASS, FAIL, RUNNING = NodeResultStatus.PASS, NodeResultStatus.FAIL, NodeResultStatus.RUNNING


def spec(**fields: object) -> ValidationRunSpec:
    return ValidationRunSpec.model_validate({"nodeSelector": SELECTOR, **fields})


def probe(at: datetime.datetime, *, failing: bool = False, busbw: float = 470.0) -> ChecksStatus:
    results = [CheckResult(name="nccl-allreduce", status=CheckStatus.PASS, observed=busbw)]
    if failing:
        results.append(
            CheckResult(
                name="gemm",
                status=CheckStatus.FAIL,
                gpu=1,
                fault_class=FaultClass.DEGRADED,
                message="slow GEMM",
            )
        )
    return ChecksStatus(
        report_time=at, backend="sim", suite="standard", results=results, job="probe-job"
    )


def candidates(
    count: int,
    *,
    probe_at: datetime.datetime | None = None,
    failing: frozenset[str] = frozenset(),
    groups: int = 1,
) -> list[Candidate]:
    names = [f"n{i}" for i in range(count)]
    return [
        Candidate(
            name=n,
            phase=Phase.VALIDATING if probe_at else Phase.HEALTHY,
            group=f"rack-{i % groups}",
            probe=probe(probe_at, failing=n in failing) if probe_at else None,
            probe_job="probe-job" if probe_at else "",
            validating_since=probe_at,
        )
        for i, n in enumerate(names)
    ]


def test_rolling_start_respects_max_concurrent_nodes() -> None:
    first = plan(
        spec=spec(maxConcurrentNodes=2),
        status=ValidationRunStatus(),
        candidates=candidates(5),
        now=T0,
    )
    assert first.status.phase is RunPhase.RUNNING
    assert first.requested == {"n0", "n1"}


def test_max_concurrent_nodes_counts_the_nodes_that_passed_and_wait_for_a_pair() -> None:
    run = spec(maxConcurrentNodes=2)
    status = plan(spec=run, status=ValidationRunStatus(), candidates=candidates(4), now=T0).status
    moment = T0
    out_of_service: list[int] = []
    for _ in range(12):
        moment += datetime.timedelta(minutes=1)
        step = plan(spec=run, status=status, candidates=candidates(4, probe_at=moment), now=moment)
        out_of_service.append(len(step.requested))
        # Pair tests report as soon as they start (the sim answers at once).
        status = step.status.model_copy(
            update={
                "pairs": [
                    p
                    if p.result is not NodeResultStatus.PENDING
                    else p.model_copy(update={"result": PASS, "busbw_gbps": 48.0})
                    for p in step.status.pairs
                ]
            }
        )
        if step.status.phase is RunPhase.SUCCEEDED:
            break
    assert step.status.phase is RunPhase.SUCCEEDED
    assert max(out_of_service) <= 2  # never more nodes out than maxConcurrentNodes
    assert sorted(p.name for p in step.status.pairs) == ["n0--n1", "n2--n3"]


def test_single_node_results_then_pairs_then_success() -> None:
    run = spec(maxConcurrentNodes=4)
    started = plan(spec=run, status=ValidationRunStatus(), candidates=candidates(4), now=T0)
    later = T0 + datetime.timedelta(minutes=1)
    paired = plan(
        spec=run, status=started.status, candidates=candidates(4, probe_at=later), now=later
    )
    assert [p.nodes for p in paired.start_pairs] == [["n0", "n1"], ["n2", "n3"]]
    assert paired.requested == {"n0", "n1", "n2", "n3"}  # held for the pair tests
    results = [
        p.model_copy(update={"result": PASS, "busbw_gbps": 380.0}) for p in paired.status.pairs
    ]
    done = plan(
        spec=run,
        status=paired.status.model_copy(update={"pairs": results}),
        candidates=candidates(4, probe_at=later),
        now=later,
    )
    assert done.status.phase is RunPhase.SUCCEEDED
    assert done.requested == frozenset()
    assert done.status.busbw is not None
    assert done.status.busbw.median_gbps == 470.0


def test_failed_pair_is_repaired_with_a_known_good_partner_before_blame() -> None:
    run = spec(maxConcurrentNodes=4)
    later = T0 + datetime.timedelta(minutes=1)
    started = plan(spec=run, status=ValidationRunStatus(), candidates=candidates(4), now=T0)
    paired = plan(
        spec=run, status=started.status, candidates=candidates(4, probe_at=later), now=later
    )
    first = [
        p.model_copy(update={"result": FAIL if "n0" in p.nodes else PASS})
        for p in paired.status.pairs
    ]
    retest = plan(
        spec=run,
        status=paired.status.model_copy(update={"pairs": first}),
        candidates=candidates(4, probe_at=later),
        now=later,
    )
    assert sorted(p.nodes[0] for p in retest.start_pairs) == ["n0", "n1"]
    assert all(p.nodes[1] in ("n2", "n3") and p.attempt == 2 for p in retest.start_pairs)
    verdicts = [
        p
        if p.attempt == 1
        else p.model_copy(
            update={"result": FAIL if p.nodes[0] == "n0" else PASS, "message": "43 GB/s"}
        )
        for p in retest.status.pairs
    ]
    done = plan(
        spec=run,
        status=retest.status.model_copy(update={"pairs": verdicts}),
        candidates=candidates(4, probe_at=later),
        now=later,
    )
    assert done.status.phase is RunPhase.FAILED
    assert done.status.failed_nodes == ["n0"]
    assert set(done.blame) == {"n0"}
    cleared = next(n for n in done.status.nodes if n.node == "n1")
    assert cleared.result is PASS
    assert "known-good" in cleared.message


def test_node_failing_its_probe_fails_the_run_without_pairing() -> None:
    run = spec(maxConcurrentNodes=3)
    later = T0 + datetime.timedelta(minutes=1)
    started = plan(spec=run, status=ValidationRunStatus(), candidates=candidates(3), now=T0)
    nodes = candidates(3, probe_at=later, failing=frozenset({"n2"}))
    paired = plan(spec=run, status=started.status, candidates=nodes, now=later)
    assert [p.nodes for p in paired.start_pairs] == [["n0", "n1"]]
    failed = next(n for n in paired.status.nodes if n.node == "n2")
    assert failed.result is FAIL
    assert "slow GEMM" in failed.message


def test_ring_pairs_neighbours_and_across_scope_mixes_groups() -> None:
    run = spec(ncclPairing="ring", pairingScope="across", maxConcurrentNodes=4)
    later = T0 + datetime.timedelta(minutes=1)
    started = plan(
        spec=run, status=ValidationRunStatus(), candidates=candidates(4, groups=2), now=T0
    )
    paired = plan(
        spec=run,
        status=started.status,
        candidates=candidates(4, probe_at=later, groups=2),
        now=later,
    )
    assert len(paired.start_pairs) == 4
    for pair in paired.start_pairs:
        a, b = (int(n[1:]) for n in pair.nodes)
        assert a % 2 != b % 2  # different racks


def test_run_times_out_with_unfinished_nodes_in_error() -> None:
    run = spec(timeout="10m", maxConcurrentNodes=1)
    started = plan(spec=run, status=ValidationRunStatus(), candidates=candidates(2), now=T0)
    late = plan(
        spec=run,
        status=started.status,
        candidates=candidates(2),
        now=T0 + datetime.timedelta(minutes=11),
    )
    assert late.status.phase is RunPhase.FAILED
    assert {n.result for n in late.status.nodes} == {NodeResultStatus.ERROR}
    assert late.requested == frozenset()


def test_the_operator_judges_a_pair_report_against_the_models_floor() -> None:
    pair = PairResult(name="a--b", nodes=["a", "b"])
    busbw, error = parse_pair_report('{"busbwGbps": 47.5}')
    assert (busbw, error) == (47.5, "")
    assert pair_verdict(pair, busbw_gbps=busbw, floor_gbps=46.0).result is PASS
    slow = pair_verdict(pair, busbw_gbps=11.5, floor_gbps=46.0)  # a quarter of the floor
    assert slow.result is FAIL
    assert "< floor 46" in slow.message
    unknown = pair_verdict(pair, busbw_gbps=47.5, floor_gbps=None)
    assert unknown.result is NodeResultStatus.ERROR


def test_a_pair_report_that_is_not_a_number_is_an_error_not_a_pass() -> None:
    for text in ('{"result": "pass"}', "pass", '{"busbwGbps": "999"}', '{"busbwGbps": true}', "[]"):
        busbw, error = parse_pair_report(text)
        assert busbw is None
        assert error
    assert parse_pair_report('{"error": "NCCL timeout"}') == (None, "NCCL timeout")


def test_a_probe_counts_by_its_job_whatever_the_nodes_clock_says() -> None:
    started = plan(spec=spec(), status=ValidationRunStatus(), candidates=candidates(2), now=T0)
    later = T0 + datetime.timedelta(minutes=5)
    skewed = [
        Candidate(
            name=c.name,
            phase=Phase.VALIDATING,
            group=c.group,
            probe=probe(T0 - datetime.timedelta(hours=3)),  # the node's clock is behind
            probe_job="probe-job",
            validating_since=T0 + datetime.timedelta(seconds=1),
        )
        for c in candidates(2)
    ]
    done = plan(spec=spec(), status=started.status, candidates=skewed, now=later)
    assert [n.result for n in done.status.nodes] == [PASS, PASS]
    stale = [
        Candidate(
            name=c.name,
            phase=Phase.VALIDATING,
            group=c.group,
            probe=probe(later + datetime.timedelta(hours=3)),  # ahead, and of an older Job
            probe_job="the-current-job",
            validating_since=T0 + datetime.timedelta(seconds=1),
        )
        for c in candidates(2)
    ]
    waiting = plan(spec=spec(), status=started.status, candidates=stale, now=later)
    assert PASS not in [n.result for n in waiting.status.nodes]


def test_a_probe_that_could_not_run_is_no_pass() -> None:
    started = plan(spec=spec(), status=ValidationRunStatus(), candidates=candidates(1), now=T0)
    broken = ChecksStatus(
        report_time=T0,
        backend="nvml",
        suite="standard",
        results=[CheckResult(name="gemm", status=CheckStatus.ERROR, message="CUDA error")],
        job="probe-job",
    )
    errored = [
        Candidate(
            name="n0",
            phase=Phase.VALIDATING,
            group="rack-0",
            probe=broken,
            probe_job="probe-job",
            validating_since=T0 + datetime.timedelta(seconds=1),
        )
    ]
    result = plan(spec=spec(), status=started.status, candidates=errored, now=T0)
    assert [n.result for n in result.status.nodes] != [PASS]


def passed_stage(run: ValidationRunSpec, count: int, *, groups: int = 1) -> object:
    later = T0 + datetime.timedelta(minutes=1)
    started = plan(
        spec=run, status=ValidationRunStatus(), candidates=candidates(count, groups=groups), now=T0
    )
    return plan(
        spec=run,
        status=started.status,
        candidates=candidates(count, probe_at=later, groups=groups),
        now=later,
    )


def test_within_scope_never_pairs_across_groups() -> None:
    run = spec(pairingScope="within", maxConcurrentNodes=6)
    paired = passed_stage(run, 6, groups=2)  # n0 n2 n4 in rack-0, n1 n3 n5 in rack-1
    assert paired.start_pairs
    for pair in paired.start_pairs:
        a, b = (int(n[1:]) for n in pair.nodes)
        assert a % 2 == b % 2, pair.nodes


def test_a_node_alone_in_its_group_is_untested_not_passed() -> None:
    run = spec(pairingScope="within", maxConcurrentNodes=3)
    lonely = [
        Candidate(
            name=n,
            phase=Phase.VALIDATING,
            group=g,
            probe=probe(T0 + datetime.timedelta(minutes=1)),
            probe_job="probe-job",
            validating_since=T0 + datetime.timedelta(seconds=1),
        )
        for n, g in (("a", "rack-0"), ("b", "rack-0"), ("c", "rack-1"))
    ]
    started = plan(spec=run, status=ValidationRunStatus(), candidates=lonely, now=T0)
    later = T0 + datetime.timedelta(minutes=1)
    paired = plan(spec=run, status=started.status, candidates=lonely, now=later)
    assert [p.nodes for p in paired.start_pairs] == [["a", "b"]]
    passed = [p.model_copy(update={"result": PASS}) for p in paired.status.pairs]
    done = plan(
        spec=run,
        status=paired.status.model_copy(update={"pairs": passed}),
        candidates=lonely,
        now=later,
    )
    assert done.status.phase is RunPhase.FAILED
    (c,) = [n for n in done.status.nodes if n.node == "c"]
    assert c.result is NodeResultStatus.ERROR
    assert "no partner" in c.message


def test_a_run_whose_pairs_never_report_fails_with_a_reason() -> None:
    run = spec(timeout="10m", maxConcurrentNodes=2)
    paired = passed_stage(run, 2)
    assert paired.start_pairs
    silent = plan(
        spec=run,
        status=paired.status,
        candidates=candidates(2, probe_at=T0 + datetime.timedelta(minutes=1)),
        now=T0 + datetime.timedelta(minutes=11),
    )
    assert silent.status.phase is RunPhase.FAILED
    assert all("did not report" in n.message for n in silent.status.nodes)


def test_the_last_node_alone_in_its_batch_is_paired_with_a_known_good_node() -> None:
    run = spec(maxConcurrentNodes=2)
    status = plan(spec=run, status=ValidationRunStatus(), candidates=candidates(3), now=T0).status
    moment = T0
    for _ in range(12):
        moment += datetime.timedelta(minutes=1)
        step = plan(spec=run, status=status, candidates=candidates(3, probe_at=moment), now=moment)
        assert len(step.requested) <= 2
        status = step.status.model_copy(
            update={
                "pairs": [
                    p
                    if p.result is not NodeResultStatus.PENDING
                    else p.model_copy(update={"result": PASS, "busbw_gbps": 48.0})
                    for p in step.status.pairs
                ]
            }
        )
        if step.status.phase is not RunPhase.RUNNING:
            break
    assert step.status.phase is RunPhase.SUCCEEDED
    last = next(p for p in step.status.pairs if "n2" in p.nodes)
    assert set(last.nodes) - {"n2"} <= {"n0", "n1"}

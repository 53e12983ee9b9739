"""nccl-tests output of 2.13 to 2.20 and ``-J`` JSON: ranks, hosts, GPU model,
busbw at the largest size, ``#wrong`` with ``%g`` semantics, and a verdict
against the floor of the run's own topology.

Vectors (formats read from NVIDIA/nccl-tests ``src/common.cu`` and ``src/util.cu``):

- ``nccl_allreduce_2x8xh100_quarter_floor.txt``: header and rank lines of
  nebius/soperator#428 (2 x 8 H100), rows of NVIDIA/nccl-tests#252;
- ``nccl_allreduce_2x8xh100.json``: the ``-J`` document ``util.cu`` writes
  (``jsonRankInfo``: one device per process), hosts of dstackai/dstack#2604;
- ``nccl_allreduce_gb10_2node.txt``: NVIDIA/dgx-spark-playbooks#103
  (nccl-tests 2.20.0, two GB10 hosts; the last two rows added in its format);
- ``nccl_alltoall_rtx5090.txt``: NVIDIA/nccl-tests#287, as posted (``N/A``);
- ``nccl_broadcast_v100_old.txt``: NVIDIA/nccl-tests#82 (no ``Group``, no
  ``redop``, ``error`` column, NCCL's own log lines between the header lines);
- ``nccl_allreduce_independent_runs.txt``: NVIDIA/nccl-tests#107, mpirun of a
  build without MPI=1, with ``#wrong`` printed ``0e+00`` as in NVIDIA/nccl#644.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuhealth.cli import main
from gpuhealth.parsers import ParseError, nccl_tests
from gpuhealth.parsers.nccl_verdict import judge
from gpuhealth.report import CheckStatus

DATA = Path(__file__).parent / "data"


def text(name: str) -> nccl_tests.NcclResult:
    return nccl_tests.parse_text((DATA / name).read_text(), source=name)


QUARTER = "nccl_allreduce_2x8xh100_quarter_floor.txt"


def test_rank_lines_give_ranks_hosts_and_gpu_model() -> None:
    result = text(QUARTER)
    assert result.world_size == 16
    assert result.host_ranks == (("worker-1", 8), ("worker-0", 8))
    assert result.gpu_models == ("NVIDIA H100 80GB HBM3",)
    assert result.ranks[8].host == "worker-0"
    assert (result.ranks[8].device, result.ranks[8].bus_id) == (0, "0x8d")


def test_largest_size_keeps_out_of_place_and_in_place_busbw() -> None:
    largest = text(QUARTER).largest
    assert largest.size_bytes == 8 << 30
    assert largest.out_of_place is not None
    assert (largest.out_of_place.busbw_gbps, largest.in_place.busbw_gbps) == (95.10, 94.80)


def test_a_two_node_run_at_a_quarter_of_its_floor_fails() -> None:
    verdict = judge(text(QUARTER))
    assert verdict.status is CheckStatus.FAIL
    assert verdict.floor_gbps == 46 * 8
    assert "over 2 hosts" in verdict.basis


def test_nics_and_floor_override_the_topology_floor() -> None:
    result = text(QUARTER)
    assert judge(result, nics=2).status is CheckStatus.PASS  # 92 GB/s floor
    assert judge(result, floor=90).status is CheckStatus.PASS
    assert judge(result, floor=100).status is CheckStatus.FAIL


def test_a_one_node_run_is_held_to_the_in_node_floor() -> None:
    verdict = judge(text("nccl_allreduce_8xh100.txt"))
    assert (verdict.status, verdict.floor_gbps) == (CheckStatus.FAIL, 460)
    assert verdict.basis == "in-node floor of H100"
    assert judge(text("nccl_allreduce_8xh100.txt"), floor=450).status is CheckStatus.PASS


def test_json_counts_ranks_per_process_and_passes_a_healthy_two_node_run() -> None:
    result = nccl_tests.parse_json((DATA / "nccl_allreduce_2x8xh100.json").read_text())
    assert result.world_size == 16
    assert result.hosts == (
        "computeinstance-e00fgx6ezb5j59wpmn",
        "computeinstance-e00r463y4p6my1q40j",
    )
    assert (result.collective, result.nccl_version, result.validated) == (
        "all_reduce_perf",
        22602,
        True,
    )
    assert judge(result).status is CheckStatus.PASS


def test_json_of_one_process_driving_eight_gpus_counts_eight_ranks() -> None:
    result = nccl_tests.parse_json((DATA / "nccl_allreduce_8xh100.json").read_text())
    assert (result.world_size, result.host_ranks) == (8, (("gpu-node-0001", 8),))


def test_an_unknown_gpu_model_gets_no_verdict_and_says_so() -> None:
    result = text("nccl_allreduce_gb10_2node.txt")
    assert (result.version, result.nccl_version, result.collective) == (
        "2.20.0",
        23102,
        "all_reduce_perf",
    )
    verdict = judge(result)
    assert verdict.status is CheckStatus.ERROR
    assert "no floors for GPU model 'NVIDIA GB10'" in verdict.message
    assert judge(result, floor=20).status is CheckStatus.PASS


def test_wrong_as_n_a_means_not_validated_not_zero() -> None:
    row = text("nccl_alltoall_rtx5090.txt").largest
    assert row.out_of_place is not None
    assert (row.out_of_place.wrong, row.in_place.wrong) == (0, None)
    assert row.in_place.algbw_gbps == pytest.approx(43046.10)


def test_old_output_is_read_by_its_column_header() -> None:
    result = text("nccl_broadcast_v100_old.txt")  # no Group, no redop, NCCL log lines
    assert result.world_size == 2
    assert [(r.size_bytes, r.redop) for r in result.rows] == [(8, ""), (2147483648, "")]
    assert result.validated is False
    assert judge(result).status is CheckStatus.ERROR  # neither all_reduce nor a known GPU


def test_independent_runs_in_one_output_are_refused() -> None:
    with pytest.raises(ParseError, match=r":8: rank 0 is printed twice: .*without MPI=1"):
        text("nccl_allreduce_independent_runs.txt")


HEADER = (
    "# nThread 1 nGpus 8 minBytes 8 maxBytes 17179869184 step: 2(factor) warmup iters: 5 "
    "iters: 20 agg iters: 1 validation: 1 graph: 0\n"
    "#  Rank  0 Group  0 Pid  41234 on gpu-node-0001 device  0 [0x18] NVIDIA H100 80GB HBM3\n"
    "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    "     time   algbw   busbw #wrong\n"
)
SUMMARY = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 460 \n"


@pytest.mark.parametrize(
    ("wrong", "count"),
    [("0", 0), ("1024", 1024), ("1e+06", 1_000_000), ("1.23457e+06", 1_234_570), ("0e+00", 0)],
)
def test_wrong_is_read_with_printf_g_semantics(wrong: str, count: int) -> None:
    row = (
        f" 17179869184    4294967296     float     sum      -1    65810  261.05  466.84  {wrong:>6}"
        "    65702  261.48  467.59       0\n"
    )
    result = nccl_tests.parse_text(HEADER + row + SUMMARY)
    assert result.largest.out_of_place is not None
    assert result.largest.out_of_place.wrong == count
    assert result.failed is (count > 0)
    assert (judge(result).status is CheckStatus.FAIL) is (count > 0)


def test_exponent_times_and_mpirun_tags_are_read() -> None:
    row = (
        " 17179869184    4294967296     float     sum      -1  1.2e+07    1.43    2.50      0"
        "  1.2e+07    1.43    2.50      0"
    )
    lines = [*HEADER.splitlines(), row, *SUMMARY.splitlines()]
    result = nccl_tests.parse_text("".join(f"[1,0]<stdout>:{line}\n" for line in lines))
    assert result.largest.in_place.time_us == pytest.approx(1.2e7)
    assert result.world_size == 1


def test_per_iteration_columns_are_read_by_the_header() -> None:
    header = (
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong"
        "    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max"
        "    i_p99    i_cv%\n"
    )
    row = (
        " 17179869184    4294967296     float     sum      -1    65810  261.05  466.84       0"
        "    65001    66702    66650     0.61    65702  261.48  467.59       0    65012    66698"
        "    66610     0.58\n"
    )
    result = nccl_tests.parse_text(header + row + SUMMARY)
    assert result.largest.in_place.busbw_gbps == pytest.approx(467.59)


GOOD_ROW = "1073741824 268435456 float sum -1 4912.3 218.58 382.52 0 4890.1 219.57 384.25 0"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (GOOD_ROW.rsplit(" 382.52", 1)[0], r":4: expected a 13-column"),
        (GOOD_ROW.replace("382.52", "nan"), r":4: busbw is 'nan'"),
        (GOOD_ROW.replace("382.52 0", "382.52 x"), r":4: #wrong is not a number: 'x'"),
    ],
)
def test_a_garbled_row_is_refused_with_its_line(row: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        nccl_tests.parse_text(HEADER + row + "\n" + SUMMARY)


def test_cli_reports_topology_and_fails_the_quarter_floor_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["parse", "nccl-tests", str(DATA / QUARTER), "--json"]) == 1
    payload = json.loads(capsys.readouterr().out)
    assert (payload["ranks"], payload["gpuModels"]) == (16, ["NVIDIA H100 80GB HBM3"])
    assert [h["host"] for h in payload["hosts"]] == ["worker-1", "worker-0"]
    assert (payload["outOfPlaceBusbwGBps"], payload["inPlaceBusbwGBps"]) == (95.1, 94.8)
    assert payload["verdict"]["status"] == "fail"
    assert main(["parse", "nccl-tests", str(DATA / QUARTER), "--floor", "90"]) == 0


def test_cli_exits_two_without_a_floor_to_judge_by(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "nccl-tests", str(DATA / "nccl_allreduce_gb10_2node.txt")]) == 2
    assert "no floors for GPU model 'NVIDIA GB10'" in capsys.readouterr().err


# nccl-tests 2.19.6, src/util.cu: the row as writeBenchmarkLinePreamble and
# writeBenchmarkLineBody print it, and jsonDouble's "%lf". Python's printf-style
# formatting is C's for these conversions, hence the percent formats below.
PREAMBLE = "%12li  %12li  %8s  %6s  %6s"
BODY = "  %7s  %6s  %6s  %6g"


@pytest.mark.parametrize("wrong", [1_000_000, 25_000_000, 1_234_567, 999_999])
def test_a_million_wrong_elements_in_exponent_form_are_read_as_a_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], wrong: int
) -> None:
    root = "%6i" % -1  # noqa: UP031 - printf, as util.cu
    row = PREAMBLE % (17179869184, 4294967296, "float", "sum", root)
    row += BODY % ("65810", "261.05", "466.84", float(wrong))
    row += BODY % ("65702", "261.48", "467.59", 0.0)
    printed = "%g" % float(wrong)  # noqa: UP031 - printf, as util.cu
    assert printed in row  # exponent form from 1e+06 on
    log = tmp_path / "all_reduce_perf.txt"
    log.write_text(HEADER + row + "\n" + SUMMARY)
    assert main(["parse", "nccl-tests", str(log), "--json"]) == 1
    payload = json.loads(capsys.readouterr().out)
    assert payload["wrongTotal"] == float(printed)  # %g keeps 6 significant digits


def test_json_nwrong_of_a_million_is_a_count() -> None:
    document = json.loads((DATA / "nccl_allreduce_2x8xh100.json").read_text())
    document["results"][-1]["in_place"]["nwrong"] = "NWRONG"
    raw = json.dumps(document).replace('"NWRONG"', "%lf" % 1e6)  # noqa: UP031 - jsonDouble
    assert '"nwrong": 1000000.000000' in raw
    result = nccl_tests.parse_json(raw)
    assert result.wrong_total == 1_000_000
    assert result.failed

"""Parsers on recorded outputs of nccl-tests, dcgmi diag and kernel logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuhealth.parsers import ParseError, dcgm_diag, kmsg, nccl_tests
from gpuhealth.report import CheckStatus, FaultClass, RecommendedAction

DATA = Path(__file__).parent / "data"


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_nccl_text_reports_busbw_at_the_largest_size() -> None:
    result = nccl_tests.parse_text(read("nccl_allreduce_8xh100.txt"))
    assert len(result.rows) == 5
    assert result.largest.size_bytes == 16 * 2**30
    assert result.peak_busbw_gbps == pytest.approx(457.59)
    assert result.avg_busbw_gbps == pytest.approx(436.88)
    assert result.out_of_bounds == 0
    assert not result.failed


def test_nccl_text_without_root_column_and_validation_off() -> None:
    result = nccl_tests.parse_text(read("nccl_allreduce_8xa100_no_root.txt"))
    assert result.peak_busbw_gbps == pytest.approx(251.42)
    assert result.largest.in_place.wrong is None


def test_nccl_wrong_data_fails_whatever_the_bandwidth() -> None:
    result = nccl_tests.parse_text(read("nccl_allreduce_wrong_data.txt"))
    assert result.failed
    assert result.out_of_bounds == 3072
    assert result.largest.out_of_place is not None
    assert result.largest.out_of_place.wrong == 1024


def test_nccl_truncated_output_is_refused() -> None:
    with pytest.raises(ParseError, match="summary lines missing"):
        nccl_tests.parse_text(read("nccl_allreduce_truncated.txt"))


@pytest.mark.parametrize("text", ["", "\n\n", "# nThread 1 nGpus 8\n#\n"])
def test_nccl_empty_output_is_refused(text: str) -> None:
    with pytest.raises(ParseError, match="no result rows"):
        nccl_tests.parse_text(text)


def test_nccl_garbled_row_names_its_line() -> None:
    text = read("nccl_allreduce_8xh100.txt").replace("8589934592  ", "8589934592 garbage ", 1)
    with pytest.raises(ParseError, match=r"nccl-tests:\d+: expected a 13-column result row"):
        nccl_tests.parse_text(text)


def test_nccl_non_numeric_bandwidth_names_its_line() -> None:
    text = read("nccl_allreduce_8xh100.txt").replace("456.84", "45x.84")
    with pytest.raises(ParseError, match=r":\d+: busbw is not a number: '45x.84'"):
        nccl_tests.parse_text(text)


def test_nccl_json_matches_text() -> None:
    result = nccl_tests.parse_json(read("nccl_allreduce_8xh100.json"))
    assert result.peak_busbw_gbps == pytest.approx(457.59)
    assert result.avg_busbw_gbps == pytest.approx(453.66)
    assert not result.failed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty input"),
        ('{"results": [', "not JSON"),
        ('{"results": []}', "no results list"),
        ('{"results": [{"size": 8, "in_place": {"time": 1}}]}', "missing or non-numeric"),
        (
            '{"results": [{"size": 8, "in_place": {"time": 1, "alg_bw": 1, "bus_bw": 1}}]}',
            "summary missing",
        ),
    ],
)
def test_nccl_json_bad_input(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        nccl_tests.parse_json(text)


def test_dcgm_diag_per_gpu_results_with_severity() -> None:
    results = dcgm_diag.parse(read("dcgmi_diag_r3.json"))
    failed = {(r.test, r.gpu): r for r in results if r.status is CheckStatus.FAIL}
    memory = failed[("memory", 1)]
    assert (memory.fault_class, memory.action) == (FaultClass.FATAL, RecommendedAction.REPLACE)
    assert memory.error_id == 95
    assert "row remapping failed" in memory.message
    pcie = failed[("pcie", 1)]
    assert (pcie.fault_class, pcie.action) == (FaultClass.DEGRADED, RecommendedAction.RESET_GPU)
    warned = [r for r in results if r.status is CheckStatus.WARN]
    assert [(r.test, r.gpu, r.fault_class) for r in warned] == [("pcie", 0, FaultClass.WATCH)]
    skipped = [r for r in results if r.status is CheckStatus.SKIPPED]
    assert skipped[0].message == "skipped: GPU had a previous failure"


def test_dcgm_diag_older_string_warnings() -> None:
    results = dcgm_diag.parse(read("dcgmi_diag_v2.json"))
    assert [(r.gpu, r.status) for r in results] == [(0, CheckStatus.PASS), (1, CheckStatus.FAIL)]
    assert results[1].message == "GPU 1 Memory bandwidth test failed"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty input"),
        (None, "not JSON"),
        ('{"something": 1}', "no 'DCGM Diagnostic' or 'DCGM GPU Diagnostic' object"),
        ('{"DCGM GPU Diagnostic": {}}', "'DCGM GPU Diagnostic': no test_categories list"),
        (
            '{"DCGM GPU Diagnostic": {"test_categories": [{"tests": [{"name": "m", "results": '
            '[{"status": "Exploded"}]}]}]}}',
            "unknown status 'Exploded'",
        ),
        ('{"DCGM GPU Diagnostic": {"test_categories": []}}', "no test results"),
    ],
)
def test_dcgm_diag_bad_input(text: str | None, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        dcgm_diag.parse(read("dcgmi_diag_truncated.json") if text is None else text)


def test_kernel_log_forms_all_parse() -> None:
    dmesg = kmsg.parse_text(read("dmesg_xid.txt")).xids
    assert [(e.code, e.pci_bus_id) for e in dmesg] == [(13, "0000:18:00"), (79, "0000:2a:00")]
    records = kmsg.parse_text(read("devkmsg_xid.txt")).xids
    assert [e.code for e in records] == [48, 154]
    assert "Node Reboot Required" in records[1].message
    journal = kmsg.parse_text(read("journal_xid.txt")).xids
    assert [(e.code, e.pci_bus_id) for e in journal] == [(94, "0000:9a:00")]


def test_kernel_log_malformed_xid_line_is_flagged_with_its_line() -> None:
    found = kmsg.parse_text(read("kmsg_malformed.txt"))
    assert found.xids == ()
    assert [(f.line, f.reason) for f in found.flagged] == [(1, "unreadable NVRM Xid line")]
    with pytest.raises(ParseError, match=r"kmsg:1: unreadable NVRM Xid line"):
        kmsg.parse_line(read("kmsg_malformed.txt"), number=1)


def test_empty_kernel_log_is_refused() -> None:
    with pytest.raises(ParseError, match="empty kernel log"):
        kmsg.parse_text("")


@pytest.mark.parametrize(
    ("nvml", "kernel"),
    [
        ("00000000:18:00.0", "0000:18:00"),
        ("0000:2A:00.0", "0000:2a:00"),
        ("0000:18:00", "0000:18:00"),
    ],
)
def test_bus_ids_from_nvml_and_kernel_agree(nvml: str, kernel: str) -> None:
    assert kmsg.normalize_bus_id(nvml) == kmsg.normalize_bus_id(kernel)

"""``dcgmi diag -j`` of DCGM 3.x and 4.x read to one shape.

The vectors follow what ``dcgmi`` prints, read from NVIDIA/DCGM:

- ``dcgmi_diag_4x_r3.json``: ``dcgmi/Diag.cpp`` at 4.x (``HelperJsonBuildOutput``,
  ``HelperJsonAddResult``, ``HelperJsonAddTestSummary``, ``HelperJsonAddEntities``,
  ``HelperJsonAddMetadata``) and ``testing/python3/dcgm_diag_schema.json``; the
  ``diagnostic`` results and their ``info`` lists are those of NVIDIA/DCGM issue
  #215, the warnings' texts and ids those of ``dcgmlib/dcgm_errors.h``;
- ``dcgmi_diag_3x_r3.json``: ``dcgmi/Diag.cpp`` at 3.3 (``dcgmDiagResponse_v10``:
  ``HelperJsonAddBasicTests`` writes a level-one warning's text under
  ``warnings`` and its ``gpu_id`` as a number, ``HelperJsonAddResult`` writes
  ``gpu_id`` as a string and ``info`` as one string, a warning prints ``Fail``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuhealth.parsers import ParseError, dcgm_diag
from gpuhealth.report import CheckStatus, FaultClass, RecommendedAction

DATA = Path(__file__).parent / "data"
V4 = (DATA / "dcgmi_diag_4x_r3.json").read_text()
V3 = (DATA / "dcgmi_diag_3x_r3.json").read_text()


def by_test_and_entity(text: str) -> dict[tuple[str, str], dcgm_diag.DiagResult]:
    return {(r.test, r.entity): r for r in dcgm_diag.parse(text)}


def test_dcgm_4x_results_are_per_entity_with_error_id_and_message() -> None:
    results = by_test_and_entity(V4)
    memory = results[("memory", "GPU1")]
    assert (memory.gpu, memory.status, memory.error_id) == (1, CheckStatus.FAIL, 80)
    assert (memory.fault_class, memory.action) == (FaultClass.FATAL, RecommendedAction.REPLACE)
    assert memory.message.startswith("GPU 1 had uncorrectable memory errors")
    assert results[("memory", "GPU0")].status is CheckStatus.PASS
    pcie = results[("pcie", "GPU1")]
    assert (pcie.fault_class, pcie.action) == (FaultClass.DEGRADED, RecommendedAction.RESET_GPU)
    assert results[("pcie", "GPU0")].fault_class is FaultClass.WATCH


def test_dcgm_4x_info_list_is_the_message_of_a_result_without_warnings() -> None:
    diagnostic = by_test_and_entity(V4)[("diagnostic", "GPU0")]
    assert diagnostic.status is CheckStatus.PASS
    assert "859.08 gigaflops" in diagnostic.message
    assert by_test_and_entity(V4)[("diagnostic", "GPU1")].status is CheckStatus.SKIPPED


def test_dcgm_4x_test_summary_adds_only_what_no_entity_said() -> None:
    results = dcgm_diag.parse(V4)
    summaries = [(r.test, r.status) for r in results if r.entity == ""]
    # memory's summary repeats GPU1's failure: not a result of its own; the
    # memory_bandwidth summary carries a test-wide error; targeted_power ran on
    # no entity at all
    assert summaries == [
        ("memory_bandwidth", CheckStatus.FAIL),
        ("targeted_power", CheckStatus.SKIPPED),
    ]
    test_wide = next(r for r in results if r.test == "memory_bandwidth" and r.entity == "")
    assert (test_wide.gpu, test_wide.error_id) == (None, 44)


def test_dcgm_4x_non_gpu_entities_name_no_gpu() -> None:
    cpu = by_test_and_entity(V4)[("cpu_eud", "CPU0")]
    assert (cpu.gpu, cpu.status) == (None, CheckStatus.PASS)


def test_dcgm_versions_are_read_from_either_shape() -> None:
    v4 = dcgm_diag.parse_report(V4)
    assert (v4.dcgm_version, v4.driver_version) == ("4.2.3", "570.133.20")
    v3 = dcgm_diag.parse_report(V3)
    assert (v3.dcgm_version, v3.driver_version) == ("3.3.1", "535.129.03")


@pytest.mark.parametrize(
    ("reported", "name"),
    [
        ("Memory Bandwidth", "memory_bandwidth"),
        ("memory_bandwidth", "memory_bandwidth"),
        ("GPU Memory", "memory"),
        ("Targeted Stress", "targeted_stress"),
        ("Targeted Power", "targeted_power"),
        ("SM Stress", "sm_stress"),
        ("Memtest", "memtest"),
        ("Pulse Test", "pulse_test"),
        ("EUD Test", "eud"),
        ("CPU EUD Test", "cpu_eud"),
        ("PCIe", "pcie"),
        ("Diagnostic", "diagnostic"),
        ("Persistence Mode", "software"),
        ("Page Retirement/Row Remap", "software"),
        ("nvbandwidth", "nvbandwidth"),
    ],
)
def test_one_test_name_across_dcgm_versions(reported: str, name: str) -> None:
    assert dcgm_diag.normalize_test_name(reported) == name


def test_dcgm_3x_and_4x_name_the_same_failure_the_same_way() -> None:
    v3 = by_test_and_entity(V3)[("memory_bandwidth", "GPU1")]
    v4 = by_test_and_entity(V4)[("memory_bandwidth", "GPU1")]
    assert (v3.test, v3.gpu, v3.error_id, v3.message) == (v4.test, v4.gpu, v4.error_id, v4.message)
    assert (v3.reported_test, v4.reported_test) == ("Memory Bandwidth", "memory_bandwidth")


def test_dcgm_3x_level_one_warning_keeps_its_text_and_gpu() -> None:
    persistence = by_test_and_entity(V3)[("software", "GPU1")]
    assert (persistence.status, persistence.error_id) == (CheckStatus.FAIL, 29)
    assert persistence.message.startswith("Persistence mode for GPU 1 is disabled")
    assert persistence.fault_class is FaultClass.NONE  # a configuration error, not the GPU


def test_dcgm_3x_warning_printed_as_fail_is_only_watched() -> None:
    stress = by_test_and_entity(V3)[("targeted_stress", "GPU0")]
    assert stress.status is CheckStatus.FAIL
    assert (stress.fault_class, stress.action) == (FaultClass.WATCH, RecommendedAction.NONE)


def test_dcgm_iterations_are_read_run_by_run() -> None:
    run = json.loads(V4)
    text = json.dumps({"iterations": [run, None], "Overall Result": "Fail", "Warning": "x"})
    results = dcgm_diag.parse(text)
    assert {r.iteration for r in results} == {0}
    assert ("memory", "GPU1") in {(r.test, r.entity) for r in results}


def test_dcgm_overall_failure_without_a_failed_test_is_still_a_failure() -> None:
    passing = {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
        {"name": "memory", "results": [{"entity_group": "GPU", "entity_id": 0, "status": "Pass"}]}
    ]}]}}  # fmt: skip
    text = json.dumps(
        {"iterations": [passing, None], "Overall Result": "Fail", "Warning": "Timeout"}
    )
    overall = [r for r in dcgm_diag.parse(text) if r.status is CheckStatus.FAIL]
    assert [(r.test, r.message) for r in overall] == [("overall", "Timeout")]


def test_dcgm_runtime_error_document_says_the_diagnostic_did_not_run() -> None:
    # HelperDisplayFailureMessage, dcgmi/Diag.cpp
    text = json.dumps(
        {
            "DCGM Diagnostic": {
                "version": "4.2.3",
                "runtime_error": "Error: Diagnostic could not be run while DCGM is paused.",
            }
        }
    )
    with pytest.raises(ParseError, match=r"runtime_error: dcgmi did not run .* paused"):
        dcgm_diag.parse(text)


def test_dcgm_lines_before_the_document_are_kept_not_fatal() -> None:
    report = dcgm_diag.parse_report("Error: Unable to run diagnostic on unsupported GPU 0.\n" + V4)
    assert report.preamble == ("Error: Unable to run diagnostic on unsupported GPU 0.",)
    assert report.results


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (
            lambda d: d["DCGM Diagnostic"]["test_categories"][1]["tests"][0]["results"][1].update(
                entity_id="one"
            ),
            r"'DCGM Diagnostic'\.test_categories\[1\]\.tests\[0\]\.results\[1\]\.entity_id",
        ),
        (
            lambda d: d["DCGM Diagnostic"]["test_categories"][2]["tests"][0]["results"][0][
                "warnings"
            ][0].update(error_id=None, error_severity="high"),
            r"test_categories\[2\]\.tests\[0\]\.results\[0\]\.warnings\[0\]\.error_severity",
        ),
        (
            lambda d: d["DCGM Diagnostic"]["test_categories"][0]["tests"][0].update(results={}),
            r"test_categories\[0\]\.tests\[0\]\.results: expected a list",
        ),
        (
            lambda d: d["DCGM Diagnostic"]["test_categories"][3]["tests"][1]["test_summary"].update(
                status="Exploded"
            ),
            r"tests\[1\]\.test_summary\.status: unknown status 'Exploded'",
        ),
    ],
)
def test_dcgm_wrong_document_names_the_json_path(edit: object, path: str) -> None:
    document = json.loads(V4)
    edit(document)  # type: ignore[operator]
    with pytest.raises(ParseError, match=path):
        dcgm_diag.parse(json.dumps(document))


def test_dcgm_truncated_document_names_its_line() -> None:
    with pytest.raises(ParseError, match=r"dcgmi-diag.json:\d+: not JSON .*truncated output\?"):
        dcgm_diag.parse(V4[: len(V4) // 2])

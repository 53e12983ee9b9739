"""The ``sxid`` check: a fatal NVSwitch SXid takes the node out, saying so, and
stays until a repair; non-fatal ones are warnings; none are GPU XIDs. The
``xid`` check names MIG attribution and reports unread kernel-log lines."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterator

from gpuhealth.checks import PASSIVE
from gpuhealth.report import CheckResult, CheckStatus, FaultClass, RecommendedAction
from gpuhealth.runner import Checker
from gpuhealth.samples import NodeSample, SxidEvent, XidEvent

NOW = datetime.datetime(2026, 12, 3, 12, 0, tzinfo=datetime.UTC)
FATAL_12020 = SxidEvent(
    code=12020,
    switch="nvswitch0",
    pci_bus_id="0000:c1:00.0",
    severity="fatal",
    link=46,
    message="egress sequence ID error",
)
NON_FATAL_22013 = SxidEvent(
    code=22013, switch="nvswitch3", pci_bus_id="0000:04:00.0", severity="non-fatal", link=44
)
STALL_12028 = SxidEvent(
    code=12028, switch="nvswitch3", pci_bus_id="0000:05:00.0", severity="non-fatal", link=32
)


class Samples:
    name = "samples"

    def __init__(self, *samples: NodeSample) -> None:
        self._samples: Iterator[NodeSample] = iter(samples)

    def sample(self) -> NodeSample:
        return next(self._samples)

    def close(self) -> None:
        pass


def sample(
    minutes: int = 0,
    *,
    xids: tuple[XidEvent, ...] = (),
    sxids: tuple[SxidEvent, ...] = (),
    errors: dict[str, str] | None = None,
) -> NodeSample:
    return NodeSample(
        time=NOW + datetime.timedelta(minutes=minutes),
        gpus=(),
        xids=xids,
        sxids=sxids,
        errors=errors or {},
    )


def checks(checker: Checker, name: str) -> list[CheckResult]:
    return [c for c in checker.run().checks if c.name == name]


def test_sxid_is_a_passive_check() -> None:
    assert "sxid" in PASSIVE


def test_a_fatal_sxid_takes_the_node_out_with_a_reason_that_says_so() -> None:
    checker = Checker(backend=Samples(sample(sxids=(FATAL_12020,))), node="n1")
    [finding] = checks(checker, "sxid")
    assert (finding.status, finding.fault_class, finding.action) == (
        CheckStatus.FAIL,
        FaultClass.FATAL,
        RecommendedAction.REBOOT,
    )
    assert finding.gpu is None
    assert finding.message.startswith("fatal NVSwitch SXid 12020 on nvswitch0 (PCI 0000:c1:00.0)")


def test_a_fatal_sxid_stays_until_the_node_is_repaired() -> None:
    checker = Checker(backend=Samples(sample(sxids=(FATAL_12020,)), sample(1), sample(2)), node="n")
    checks(checker, "sxid")
    [again] = checks(checker, "sxid")
    assert again.status is CheckStatus.FAIL
    checker.memory.clear_latched()
    assert [c.status for c in checks(checker, "sxid")] == [CheckStatus.PASS]


def test_an_sxid_is_never_a_gpu_xid() -> None:
    checker = Checker(backend=Samples(sample(sxids=(FATAL_12020,))), node="n1")
    report = checker.run()
    assert [c.status for c in report.checks if c.name == "xid"] == [CheckStatus.PASS]


def test_non_fatal_sxids_are_one_warning_per_code_and_not_latched() -> None:
    again = dataclasses.replace(NON_FATAL_22013, link=45)
    checker = Checker(backend=Samples(sample(sxids=(NON_FATAL_22013, again)), sample(1)), node="n")
    [warning] = checks(checker, "sxid")
    assert (warning.status, warning.fault_class) == (CheckStatus.WARN, FaultClass.WATCH)
    assert warning.message.startswith("2 non-fatal NVSwitch SXid 22013 on nvswitch3")
    assert [c.status for c in checks(checker, "sxid")] == [CheckStatus.PASS]


def test_an_sxid_that_stalls_nvlink_degrades_and_a_later_fatal_one_wins() -> None:
    fatal_same_code = SxidEvent(code=12028, switch="nvswitch3", severity="fatal", link=32)
    checker = Checker(
        backend=Samples(sample(sxids=(STALL_12028,)), sample(1, sxids=(fatal_same_code,))),
        node="n",
    )
    [stall] = checks(checker, "sxid")
    assert (stall.fault_class, stall.action) == (FaultClass.DEGRADED, RecommendedAction.REBOOT)
    [fatal] = checks(checker, "sxid")
    assert fatal.fault_class is FaultClass.FATAL


def test_xid_message_names_mig_instance_and_process() -> None:
    event = XidEvent(code=48, gpu=0, gpu_instance=2, compute_instance=0, pid=1234, process="python")
    [finding] = checks(Checker(backend=Samples(sample(xids=(event,))), node="n"), "xid")
    assert finding.message == "XID 48: double-bit ECC error (MIG GI 2/CI 0, pid 1234 python)"


def test_unread_kernel_log_lines_are_a_warning_next_to_the_xid_verdict() -> None:
    errors = {"kernel-log": "1 driver line(s) of /dev/kmsg could not be read"}
    report = Checker(backend=Samples(sample(errors=errors)), node="n").run()
    found = {c.name: c for c in report.checks if c.name in ("xid", "kernel-log")}
    assert found["xid"].status is CheckStatus.PASS
    assert (found["kernel-log"].status, found["kernel-log"].fault_class) == (
        CheckStatus.WARN,
        FaultClass.WATCH,
    )
    assert report.healthy

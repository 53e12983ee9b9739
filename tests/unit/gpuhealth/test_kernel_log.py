"""Kernel logs: XIDs in every prefix style, NVSwitch SXids as switch events,
unreadable driver lines flagged while the rest is read, and the follower.

The vectors' first lines name where each line comes from (driver source and
issue threads); see the data files.
"""

from __future__ import annotations

import datetime
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from gpuhealth.backends.nvml import NvmlBackend
from gpuhealth.backends.sim import SimBackend
from gpuhealth.cli import main
from gpuhealth.kernel_log import KernelLog
from gpuhealth.models import get_model
from gpuhealth.parsers import ParseError, kmsg
from gpuhealth.report import FaultClass, RecommendedAction

DATA = Path(__file__).parent / "data"
PREFIXES = (DATA / "kmsg_prefix_styles.txt").read_text()
SWITCHES = (DATA / "kmsg_nvswitch_sxid.txt").read_text()
PARTIAL = (DATA / "kmsg_partial.txt").read_text()


def test_every_prefix_style_gives_its_xid() -> None:
    found = kmsg.parse_text(PREFIXES)
    assert [(e.code, e.pci_bus_id) for e in found.xids] == [
        (43, "0009:01:00"),  # /dev/kmsg record (its dictionary lines are no events)
        (43, "0009:01:00"),  # dmesg
        (13, "0000:cb:00"),  # dmesg --ctime
        (95, "0000:01:00"),  # dmesg -t
        (43, "0000:00:05"),  # dmesg -x -T
        (94, "0000:00:08"),  # journald short
        (31, "0000:00:07"),  # journald short-iso
        (79, "0000:18:00"),  # syslog with the kernel's timestamp
        (45, "0000:dc:00"),  # kernel:
        (94, "0000:01:00"),  # MIG, GPU instance only
        (43, "0000:df:00"),  # MIG, GPU and compute instance
        (14, "0000:03:00"),  # old drivers: no PCI: tag
        (48, "0000:01:00"),  # no process
    ]
    assert found.flagged == ()
    assert found.sxids == ()


def test_mig_xid_names_its_instances_and_process() -> None:
    mig = kmsg.parse_text(PREFIXES).xids[10]
    assert (mig.gpu_instance, mig.compute_instance) == (2, 0)
    assert (mig.pid, mig.process, mig.message) == (1234, "python", "Ch 00000010")
    gpu_instance_only = kmsg.parse_text(PREFIXES).xids[9]
    assert (gpu_instance_only.gpu_instance, gpu_instance_only.compute_instance) == (5, None)
    assert (gpu_instance_only.pid, gpu_instance_only.process) == (7194, None)
    assert gpu_instance_only.message.startswith("Contained: CE User Channel")


@pytest.mark.parametrize(
    ("line", "pid", "process", "message"),
    [
        (
            "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM",
            None,
            None,
            "Graphics SM",
        ),
        ("NVRM: Xid (PCI:0000:01:00): 48, An uncorrectable double bit error", None, None, ""),
        ("NVRM: Xid (PCI:0000:01:00): 62, pid=99, name=a b, ", 99, "a b", ""),
        ("NVRM: Xid (PCI:0000:01:00): 79", None, None, ""),
    ],
)
def test_unknown_or_missing_pid_and_name_are_none(
    line: str, pid: int | None, process: str | None, message: str
) -> None:
    event = kmsg.parse_line(line)
    assert isinstance(event, kmsg.XidEvent)
    assert (event.pid, event.process) == (pid, process)
    if message or event.code == 79:
        assert event.message == message


def test_each_xid_carries_its_class_and_action_from_the_xid_table() -> None:
    rules = {e.code: e.rule for e in kmsg.parse_text(PREFIXES).xids}
    assert (rules[79].fault_class, rules[79].action) == (FaultClass.FATAL, RecommendedAction.REBOOT)
    assert rules[43].fault_class is FaultClass.APPLICATION
    assert (rules[94].fault_class, rules[94].action) == (
        FaultClass.DEGRADED,
        RecommendedAction.RESET_GPU,
    )


def test_sxids_are_switch_events_never_gpu_xids() -> None:
    found = kmsg.parse_text(SWITCHES)
    assert [e.code for e in found.xids] == [74]  # the GPU's own XID stays an XID
    assert [(e.code, e.switch, e.pci_bus_id, e.link, e.severity) for e in found.sxids] == [
        (22013, "nvswitch3", "0000:04:00.0", 44, "non-fatal"),
        (12028, "nvswitch3", "0000:05:00.0", 32, "non-fatal"),
        (12020, "nvswitch0", "0000:c1:00.0", 46, "fatal"),
        (10007, "nvswitch2", "0000:87:00.0", None, ""),
    ]
    assert found.flagged == ()


def test_sxid_fatality_comes_from_the_line_and_the_table() -> None:
    rules = {e.code: e.rule for e in kmsg.parse_text(SWITCHES).sxids}
    assert rules[22013].fault_class is FaultClass.WATCH  # Non-fatal, and harmless
    assert (rules[12028].fault_class, rules[12028].action) == (
        FaultClass.DEGRADED,
        RecommendedAction.REBOOT,
    )
    assert rules[12020].fatal
    assert rules[12020].always_fatal
    assert rules[10007].fatal  # the line says nothing: the table does


def test_a_severity_record_completes_the_summary_before_it() -> None:
    parser = kmsg.Parser()
    parser.feed("nvidia-nvswitch0: SXid (PCI:0000:c1:00.0): 15010, route parity error")
    assert parser.take().sxids[0].severity == ""  # handed out before its record
    parser.feed("nvidia-nvswitch0: SXid (PCI:0000:c1:00.0): 15010, Severity 1 Engine instance 3")
    late = parser.take().sxids
    assert [(e.code, e.severity) for e in late] == [(15010, "fatal")]
    parser.feed("nvidia-nvswitch0: SXid (PCI:0000:c1:00.0): 11001, ingress invalid command")
    parser.feed("nvidia-nvswitch0: SXid (PCI:0000:c1:00.0): 11001, Severity 0 Engine instance 9")
    assert [(e.code, e.severity) for e in parser.take().sxids] == [(11001, "non-fatal")]


def test_an_unreadable_line_is_flagged_and_the_rest_is_read() -> None:
    found = kmsg.parse_text(PARTIAL)
    assert [e.code for e in found.xids] == [13, 79]
    assert found.partial
    assert [(f.line, f.reason) for f in found.flagged] == [
        (2, "unreadable NVRM Xid line"),
        (5, "unreadable NVSwitch SXid line"),
    ]
    assert found.flagged[0].text.endswith("Graphics Exception: ESR 0x504648=0x1000e")


def test_parse_line_still_refuses_an_unreadable_line_by_number() -> None:
    with pytest.raises(ParseError, match=r"kern.log:7: unreadable NVSwitch SXid line"):
        kmsg.parse_line("nvidia-nvswitch1: SXid (PCI:0000:84): x", number=7, source="kern.log")


def test_cli_lists_events_and_flagged_lines_and_fails_on_the_fatal_xid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "kern.log"
    log.write_text(PARTIAL)
    assert main(["parse", "kmsg", str(log), "--json"]) == 1
    payload = json.loads(capsys.readouterr().out)
    assert [x["code"] for x in payload["xids"]] == [13, 79]
    assert [f["line"] for f in payload["flagged"]] == [2, 5]
    assert payload["partial"] is True


def test_cli_exits_three_for_a_partial_read_without_failures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["parse", "kmsg", str(DATA / "kmsg_malformed.txt")]) == 3
    out, err = capsys.readouterr()
    assert out.startswith("UNREAD line 1: unreadable NVRM Xid line")
    assert "1 driver line(s) could not be read" in err


def test_cli_reports_sxids_as_switch_events(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "kmsg", str(DATA / "kmsg_nvswitch_sxid.txt"), "--json"]) == 1
    sxids = json.loads(capsys.readouterr().out)["sxids"]
    fatal = [(s["code"], s["switch"]) for s in sxids if s["fatal"]]
    assert fatal == [(12020, "nvswitch0"), (10007, "nvswitch2")]


def test_cli_exits_zero_for_a_clean_log_of_application_xids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "kern.log"
    log.write_text(PARTIAL.splitlines()[0] + "\n")
    assert main(["parse", "kmsg", str(log)]) == 0
    assert capsys.readouterr().out.startswith("XID     13 0000:18:00     application/")


def test_follower_keeps_events_around_a_flagged_line(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    reader = KernelLog(log)
    with log.open("a") as out:
        out.write(PARTIAL)
    found = reader.read()
    assert [e.code for e in found.xids] == [13, 79]
    assert reader.flagged_total == 2
    assert reader.partial_reason is not None
    assert "line 5" in reader.partial_reason
    with log.open("a") as out:
        out.write("[9200.0] NVRM: Xid (PCI:0000:2a:00): 48, An uncorrectable double bit error\n")
    assert [e.code for e in reader.read_new()] == [48]
    assert reader.flagged_total == 2  # still said: the lost lines are still lost
    reader.close()


def test_follower_completes_an_sxid_across_reads(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    reader = KernelLog(log)
    lines = SWITCHES.splitlines()
    with log.open("a") as out:
        out.write("\n".join(lines[:8]) + "\n")  # through 22013's summary
    assert [e.code for e in reader.read().sxids] == [22013]
    with log.open("a") as out:
        out.write("\n".join(lines[8:]) + "\n")  # its Severity record, then the rest
    assert [e.code for e in reader.read().sxids] == [12028, 12020, 10007]
    reader.close()


def test_a_kmsg_record_is_read_by_its_first_line(tmp_path: Path) -> None:
    record = tmp_path / "record"
    record.write_text(
        "4,1835,8123553999,-;NVRM: Xid (PCI:0000:5d:00): 48, An uncorrectable double bit error\n"
        " SUBSYSTEM=pci\n DEVICE=+pci:0000:5d:00.0\n"
    )
    reader = KernelLog(record, from_start=True)
    reader._is_kmsg = True  # one read of this file stands for one /dev/kmsg record
    assert [(e.code, e.message) for e in reader.read_new()] == [
        (48, "An uncorrectable double bit error")
    ]
    assert reader.flagged_total == 0
    reader.close()


class _NvmlError(Exception):
    pass


def _bare_pynvml() -> Any:
    """pynvml with no GPU at all: enough for the backend's kernel-log wiring."""
    nvml: Any = types.ModuleType("pynvml")
    nvml.NVMLError = nvml.NVMLError_NotSupported = _NvmlError
    nvml.NVMLError_GpuIsLost = nvml.NVMLError_Timeout = _NvmlError
    nvml.nvmlInit = nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetCount = lambda: 0

    def no_events() -> None:
        raise _NvmlError("events not supported")

    nvml.nvmlEventSetCreate = no_events
    nvml.nvmlSystemGetDriverVersion = lambda: "570.133.20"
    nvml.nvmlSystemGetCudaDriverVersion_v2 = lambda: 12080
    return nvml


def test_nvml_backend_delivers_sxids_and_names_flagged_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _bare_pynvml())
    log = tmp_path / "kern.log"
    log.write_text("")
    backend = NvmlBackend(kernel_log=log, sysfs_ib=tmp_path / "none")
    with log.open("a") as out:
        out.write(SWITCHES.splitlines()[11] + "\n")  # the fatal 12020
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    assert backend.wait_for_xid(0.0)  # a fatal SXid wakes the agent
    with log.open("a") as out:
        out.write(PARTIAL)
    sample = backend.sample()
    assert [e.code for e in sample.sxids] == [12020]
    assert [e.code for e in sample.xids] == [13, 79]
    assert "2 driver line(s)" in sample.errors["kernel-log"]
    assert sample.time <= datetime.datetime.now(datetime.UTC)
    backend.close()


# open-gpu-kernel-modules: NVSWITCH_PRINT_SXID (common_nvswitch.h) formats
# "nvidia-%s: SXid (PCI:" NVLINK_PCI_DEV_FMT "): %05d, " and nvswitch_os_print
# (linux_nvswitch.c) hands it to printk at KERN_ERR: /dev/kmsg shows level 3.
SXID_12028 = (
    "3,1834,8123553311,-;nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, "
    "Link 32 egress non-posted PRIV error (First)\n"
    "3,1835,8123553312,-;nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, "
    "Severity 0 Engine instance 32 Sub-engine instance 00\n"
)


def test_parse_kmsg_reads_an_nvswitch_sxid_as_a_switch_event_never_a_gpu_xid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "kmsg"
    log.write_text(SXID_12028)
    main(["parse", "kmsg", str(log), "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert payload["xids"] == []
    ((sxid),) = payload["sxids"]
    assert (sxid["code"], sxid["switch"], sxid["fatal"]) == (12028, "nvswitch3", False)


def test_the_sim_backend_reports_the_xids_its_kernel_log_shows(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    backend = SimBackend(node="n", model=get_model("H100"), noise=0, kernel_log=KernelLog(log))
    assert backend.sample().xids == ()
    bus = backend.identity(0).pci_bus_id  # 00000000:18:00.0, as NVML says it
    with log.open("a") as out:
        out.write(
            f"NVRM: Xid (PCI:{bus[4:14]}): 79, pid='<unknown>', GPU has fallen off the bus.\n"
        )
    (event,) = backend.sample().xids
    assert (event.code, event.pci_bus_id) == (79, "0000:18:00")
    assert backend.sample().xids == ()  # read once, as the driver logs it once
    backend.close()


def test_the_sim_backend_says_when_its_kernel_log_cannot_be_read(tmp_path: Path) -> None:
    backend = SimBackend(
        node="n", model=get_model("H100"), noise=0, kernel_log=KernelLog(tmp_path / "none")
    )
    assert backend.sample().errors["xid"].startswith(f"cannot read {tmp_path / 'none'}")

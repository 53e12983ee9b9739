"""Backends: NVML errors per call, lost GPUs, missing driver; kernel log; sysfs IB."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpuhealth.backends.base import BackendUnavailableError
from gpuhealth.backends.nvml import NvmlBackend
from gpuhealth.kernel_log import KernelLog
from gpuhealth.samples import ClockEvent
from gpuhealth.sysfs_ib import read_ports
from support.fake_pynvml import fake_pynvml


def test_nvml_without_library_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(BackendUnavailableError, match="NVML not available"):
        NvmlBackend(kernel_log=None)


def test_nvml_errors_are_per_field_and_lost_gpus_are_findings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(lost={1}, broken_ecc={0}))
    backend = NvmlBackend(kernel_log=None, sysfs_ib=tmp_path / "none")
    sample = backend.sample()
    first, second = sample.gpus
    assert second.lost
    assert not first.lost
    assert first.ecc_dbe_volatile is None
    assert "UnknownError Error" in first.errors["ecc"]
    assert first.retired_pages_sbe is None
    assert "retired_pages" not in first.errors
    assert first.clock_events == {ClockEvent.HW_THERMAL}
    assert len(first.nvlinks) == 18
    assert sample.cuda_version == "12.6"
    assert first.power_w == 312.0
    assert first.sm_clock_mhz == 1980.0
    backend.close()


def test_kernel_log_follows_a_file(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("[1.0] NVRM: Xid (PCI:0000:18:00): 13, old event\n")
    reader = KernelLog(log)
    assert reader.read_new() == []
    with log.open("a") as out:
        out.write("[2.0] NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.\n")
        out.write("[3.0] NVRM: Xid (PCI:0000:18:00): 4")  # half-written line
    assert [e.code for e in reader.read_new()] == [79]
    with log.open("a") as out:
        out.write("8, completed later\n")
    assert [e.code for e in reader.read_new()] == [48]
    reader.close()


def test_unreadable_kernel_log_is_reported_not_raised(tmp_path: Path) -> None:
    reader = KernelLog(tmp_path / "missing")
    assert reader.read_new() == []
    assert reader.error is not None
    assert "cannot read" in reader.error


def write_port(root: Path, device: str, port: str, **files: str) -> None:
    path = root / device / "ports" / port
    (path / "counters").mkdir(parents=True)
    for name, value in files.items():
        target = (
            path / "counters" / name
            if name in ("link_downed", "symbol_error", "port_xmit_data")
            else path / name
        )
        target.write_text(value + "\n")


def test_sysfs_ports_are_read(tmp_path: Path) -> None:
    write_port(
        tmp_path,
        "mlx5_0",
        "1",
        state="4: ACTIVE",
        phys_state="5: LinkUp",
        rate="400 Gb/sec (4X NDR)",
        link_layer="InfiniBand",
        link_downed="2",
        port_xmit_data="100",
    )
    write_port(
        tmp_path,
        "mlx5_1",
        "1",
        state="1: DOWN",
        phys_state="3: Disabled",
        rate="10 Gb/sec (4X SDR)",
        link_layer="Ethernet",
    )
    ports = read_ports(tmp_path)
    assert [(p.name, p.state, p.phys_state, p.rate_gbps) for p in ports] == [
        ("mlx5_0/1", "ACTIVE", "LinkUp", 400.0),
        ("mlx5_1/1", "DOWN", "Disabled", 10.0),
    ]
    assert ports[0].link_downed == 2
    assert ports[0].xmit_bytes == 400
    assert ports[1].link_layer == "Ethernet"


def test_no_infiniband_means_no_ports(tmp_path: Path) -> None:
    assert read_ports(tmp_path / "absent") == ()

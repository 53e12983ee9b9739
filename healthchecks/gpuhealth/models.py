"""GPU models Pitcrew knows, as one table of data.

Everything that depends on the GPU model (the node label GPU Feature Discovery
writes, NVLink link count, PCIe generation, peak dense bf16 throughput for MFU)
reads this table, so supporting a new model is one row, not a hunt through
if-chains.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuhealth.errors import GpuhealthError


@dataclass(frozen=True)
class GpuModel:
    """Static facts about one GPU model, and the floors its probes must reach."""

    name: str
    """Short name used on the command line and in policies (``H100``)."""
    product: str
    """The ``nvidia.com/gpu.product`` label value GPU Feature Discovery writes."""
    nvml_names: tuple[str, ...]
    """Names NVML reports for this model (``nvmlDeviceGetName``)."""
    memory_mib: int
    nvlink_links: int
    pcie_gen: int
    pcie_width: int
    slowdown_temp_c: float
    """Typical slowdown temperature; NVML's own threshold wins when it reports one."""
    tdp_w: float
    max_sm_clock_mhz: float
    """Boost SM clock from the data sheet; a loaded healthy GPU runs near it."""
    peak_bf16_tflops: float
    """Peak dense bf16 tensor throughput (no sparsity), from NVIDIA's data sheets."""
    hbm_peak_gbps: float
    """Peak HBM bandwidth from the data sheet, GB/s."""
    gemm_floor_tflops: float
    """Least dense bf16 GEMM throughput a healthy GPU sustains (8192^3)."""
    hbm_floor_gbps: float
    """Least device-to-device copy bandwidth (read + write) a healthy GPU sustains."""
    pcie_floor_gbps: float
    """Least host-to-device copy bandwidth over a healthy x16 link, pinned memory."""
    nccl_intra_floor_gbps: float
    """Least single-node all-reduce bus bandwidth over all GPUs, 16 GiB messages."""
    nccl_inter_floor_gbps_per_nic: float
    """Least inter-node ring all-reduce bus bandwidth per 400G NIC."""
    nvlink_fabric: bool = False
    """An NVSwitch board whose GPUs register with an NVLink fabric the fabric manager
    sets up, and NVML reports that registration (Hopper and later; A100 boards need the
    fabric manager too, but NVML reports no per-GPU fabric state for them)."""


# How the floors follow from the data sheet, so a row can be checked by hand.
# Each SKU keeps the ratios of its family's SXM row:
#   gemm floor = peak dense bf16 x 0.606 (H100 and H200: 600 / 989.4),
#                                x 0.737 (A100: 230 / 312);
#   hbm floor  = HBM peak x 0.716 (H100: 2400 / 3350), x 0.708 (H200: 3400 / 4800),
#                         x 0.736 (A100: 1500 / 2039);
#   pcie floor = 0.625 x the x16 rate per direction (Gen5 64 GB/s -> 40, Gen4 32 -> 20);
#   inter-node per NIC = the family's own (Gen5 hosts 46, Gen4 hosts 22: the NIC
#   sits behind the same PCIe generation).
# Products are rounded down to a multiple of 5. The SXM rows' single-node
# all-reduce floors (460, 431, 220) are for 8-GPU NVSwitch boards. PCIe and NVL
# cards are joined at most in bridged pairs (quads for H200 NVL), so an
# all-reduce over all of a node's GPUs crosses PCIe: its floor is the PCIe floor
# (0.625 x the x16 rate per direction). That one is derived, not measured: check
# it against all_reduce_perf on a known-good node of the SKU before trusting a
# failure. NVLink link counts for PCIe cards are the links of their NVLink bridge
# (600 GB/s: 12 links, 900 GB/s: 18). Memory is what NVML reports (nvidia-smi's
# total MiB). Peak bf16 is the data sheet's figure with sparsity, halved.
# fmt: off
MODELS: dict[str, GpuModel] = {
    model.name: model
    for model in (
        GpuModel(
            name="H100", product="NVIDIA-H100-80GB-HBM3", nvml_names=("NVIDIA H100 80GB HBM3",),
            memory_mib=81559, nvlink_links=18, pcie_gen=5, pcie_width=16,
            slowdown_temp_c=87, tdp_w=700, peak_bf16_tflops=989.4, hbm_peak_gbps=3350,
            gemm_floor_tflops=600, hbm_floor_gbps=2400, pcie_floor_gbps=40,
            nccl_intra_floor_gbps=460, nccl_inter_floor_gbps_per_nic=46,
            max_sm_clock_mhz=1980, nvlink_fabric=True,
        ),
        # H100 PCIe: 1,513 TFLOPS bf16 with sparsity, 2.0 TB/s HBM2e, 300-350 W.
        GpuModel(
            name="H100-PCIE", product="NVIDIA-H100-PCIe", nvml_names=("NVIDIA H100 PCIe",),
            memory_mib=81559, nvlink_links=12, pcie_gen=5, pcie_width=16,
            slowdown_temp_c=87, tdp_w=350, peak_bf16_tflops=756.0, hbm_peak_gbps=2000,
            gemm_floor_tflops=455, hbm_floor_gbps=1430, pcie_floor_gbps=40,
            nccl_intra_floor_gbps=40, nccl_inter_floor_gbps_per_nic=46,
            max_sm_clock_mhz=1755,
        ),
        # H100 NVL: 1,671 TFLOPS bf16 with sparsity, 94 GB HBM3 at 3.9 TB/s, 350-400 W.
        GpuModel(
            name="H100-NVL", product="NVIDIA-H100-NVL", nvml_names=("NVIDIA H100 NVL",),
            memory_mib=95830, nvlink_links=12, pcie_gen=5, pcie_width=16,
            slowdown_temp_c=87, tdp_w=400, peak_bf16_tflops=835.5, hbm_peak_gbps=3900,
            gemm_floor_tflops=505, hbm_floor_gbps=2790, pcie_floor_gbps=40,
            nccl_intra_floor_gbps=40, nccl_inter_floor_gbps_per_nic=46,
            max_sm_clock_mhz=1785,
        ),
        GpuModel(
            name="H200", product="NVIDIA-H200", nvml_names=("NVIDIA H200",),
            memory_mib=143771, nvlink_links=18, pcie_gen=5, pcie_width=16,
            slowdown_temp_c=87, tdp_w=700, peak_bf16_tflops=989.4, hbm_peak_gbps=4800,
            gemm_floor_tflops=600, hbm_floor_gbps=3400, pcie_floor_gbps=40,
            nccl_intra_floor_gbps=431, nccl_inter_floor_gbps_per_nic=46,
            max_sm_clock_mhz=1980, nvlink_fabric=True,
        ),
        # H200 NVL: 1,671 TFLOPS bf16 with sparsity, 141 GB HBM3e at 4.8 TB/s, up to
        # 600 W, 2- or 4-way NVLink bridge at 900 GB/s.
        GpuModel(
            name="H200-NVL", product="NVIDIA-H200-NVL", nvml_names=("NVIDIA H200 NVL",),
            memory_mib=143771, nvlink_links=18, pcie_gen=5, pcie_width=16,
            slowdown_temp_c=87, tdp_w=600, peak_bf16_tflops=835.5, hbm_peak_gbps=4800,
            gemm_floor_tflops=505, hbm_floor_gbps=3400, pcie_floor_gbps=40,
            nccl_intra_floor_gbps=40, nccl_inter_floor_gbps_per_nic=46,
            max_sm_clock_mhz=1785,
        ),
        GpuModel(
            name="A100", product="NVIDIA-A100-SXM4-80GB", nvml_names=("NVIDIA A100-SXM4-80GB",),
            memory_mib=81920, nvlink_links=12, pcie_gen=4, pcie_width=16,
            slowdown_temp_c=90, tdp_w=400, peak_bf16_tflops=312.0, hbm_peak_gbps=2039,
            gemm_floor_tflops=230, hbm_floor_gbps=1500, pcie_floor_gbps=20,
            nccl_intra_floor_gbps=220, nccl_inter_floor_gbps_per_nic=22,
            max_sm_clock_mhz=1410,
        ),
        # A100 SXM4 40GB: the 80GB board's compute and NVSwitch board, HBM2 at 1,555 GB/s.
        GpuModel(
            name="A100-40GB", product="NVIDIA-A100-SXM4-40GB",
            nvml_names=("NVIDIA A100-SXM4-40GB",),
            memory_mib=40960, nvlink_links=12, pcie_gen=4, pcie_width=16,
            slowdown_temp_c=90, tdp_w=400, peak_bf16_tflops=312.0, hbm_peak_gbps=1555,
            gemm_floor_tflops=230, hbm_floor_gbps=1140, pcie_floor_gbps=20,
            nccl_intra_floor_gbps=220, nccl_inter_floor_gbps_per_nic=22,
            max_sm_clock_mhz=1410,
        ),
        # A100 PCIe 40GB: 312 TFLOPS bf16 dense, 1,555 GB/s HBM2, 250 W.
        GpuModel(
            name="A100-PCIE-40GB", product="NVIDIA-A100-PCIE-40GB",
            nvml_names=("NVIDIA A100-PCIE-40GB",),
            memory_mib=40960, nvlink_links=12, pcie_gen=4, pcie_width=16,
            slowdown_temp_c=90, tdp_w=250, peak_bf16_tflops=312.0, hbm_peak_gbps=1555,
            gemm_floor_tflops=230, hbm_floor_gbps=1140, pcie_floor_gbps=20,
            nccl_intra_floor_gbps=20, nccl_inter_floor_gbps_per_nic=22,
            max_sm_clock_mhz=1410,
        ),
        # A100 PCIe 80GB: 312 TFLOPS bf16 dense, 1,935 GB/s HBM2e, 300 W.
        GpuModel(
            name="A100-PCIE-80GB", product="NVIDIA-A100-80GB-PCIe",
            nvml_names=("NVIDIA A100 80GB PCIe",),
            memory_mib=81920, nvlink_links=12, pcie_gen=4, pcie_width=16,
            slowdown_temp_c=90, tdp_w=300, peak_bf16_tflops=312.0, hbm_peak_gbps=1935,
            gemm_floor_tflops=230, hbm_floor_gbps=1420, pcie_floor_gbps=20,
            nccl_intra_floor_gbps=20, nccl_inter_floor_gbps_per_nic=22,
            max_sm_clock_mhz=1410,
        ),
    )
}
# fmt: on


class UnknownGpuModelError(GpuhealthError, ValueError):
    """Raised for a GPU model name that is not in :data:`MODELS`."""


def model_for_nvml_name(nvml_name: str) -> GpuModel | None:
    """The model NVML's device name belongs to, if Pitcrew knows it.

    The match is exact (surrounding whitespace aside): SKUs share prefixes
    ("NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H100 80GB HBM3") and their
    floors differ, so a near miss is an unknown model, never the closest row.
    """
    name = nvml_name.strip()
    for model in MODELS.values():
        if name in model.nvml_names:
            return model
    return None


def require_model_for_nvml_name(nvml_name: str) -> GpuModel:
    """Like :func:`model_for_nvml_name`, but an unknown name is an error naming
    the ones Pitcrew knows."""
    model = model_for_nvml_name(nvml_name)
    if model is None:
        known = ", ".join(sorted(n for m in MODELS.values() for n in m.nvml_names))
        raise UnknownGpuModelError(f"unknown GPU model {nvml_name.strip()!r}; known: {known}")
    return model


def get_model(name: str) -> GpuModel:
    """Look a model up by short name, case-insensitively."""
    model = MODELS.get(name.upper())
    if model is None:
        known = ", ".join(sorted(MODELS))
        raise UnknownGpuModelError(f"unknown GPU model {name!r}; known models: {known}")
    return model


def model_for_product(product: str) -> GpuModel | None:
    """The model a ``nvidia.com/gpu.product`` node label names, if Pitcrew knows it."""
    for model in MODELS.values():
        if product == model.product:
            return model
    return None

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
        ),
        GpuModel(
            name="H200", product="NVIDIA-H200", nvml_names=("NVIDIA H200",),
            memory_mib=143771, nvlink_links=18, pcie_gen=5, pcie_width=16,
            slowdown_temp_c=87, tdp_w=700, peak_bf16_tflops=989.4, hbm_peak_gbps=4800,
            gemm_floor_tflops=600, hbm_floor_gbps=3400, pcie_floor_gbps=40,
            nccl_intra_floor_gbps=431, nccl_inter_floor_gbps_per_nic=46,
        ),
        GpuModel(
            name="A100", product="NVIDIA-A100-SXM4-80GB", nvml_names=("NVIDIA A100-SXM4-80GB",),
            memory_mib=81920, nvlink_links=12, pcie_gen=4, pcie_width=16,
            slowdown_temp_c=90, tdp_w=400, peak_bf16_tflops=312.0, hbm_peak_gbps=2039,
            gemm_floor_tflops=230, hbm_floor_gbps=1500, pcie_floor_gbps=20,
            nccl_intra_floor_gbps=220, nccl_inter_floor_gbps_per_nic=22,
        ),
    )
}
# fmt: on


class UnknownGpuModelError(GpuhealthError, ValueError):
    """Raised for a GPU model name that is not in :data:`MODELS`."""


def model_for_nvml_name(nvml_name: str) -> GpuModel | None:
    """The model NVML's device name belongs to, if Pitcrew knows it."""
    for model in MODELS.values():
        if nvml_name in model.nvml_names:
            return model
    return None


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

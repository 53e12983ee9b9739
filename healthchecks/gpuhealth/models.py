"""GPU models Pitcrew knows, as one table of data.

Everything that depends on the GPU model (the node label GPU Feature Discovery
writes, NVLink link count, PCIe generation, peak dense bf16 throughput for MFU)
reads this table, so supporting a new model is one row, not a hunt through
if-chains.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuModel:
    """Static facts about one GPU model."""

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
    peak_bf16_tflops: float
    """Peak dense bf16 tensor throughput (no sparsity), from NVIDIA's data sheets."""


MODELS: dict[str, GpuModel] = {
    model.name: model
    for model in (
        GpuModel(
            name="H100",
            product="NVIDIA-H100-80GB-HBM3",
            nvml_names=("NVIDIA H100 80GB HBM3",),
            memory_mib=81559,
            nvlink_links=18,
            pcie_gen=5,
            pcie_width=16,
            peak_bf16_tflops=989.4,
        ),
        GpuModel(
            name="H200",
            product="NVIDIA-H200",
            nvml_names=("NVIDIA H200",),
            memory_mib=143771,
            nvlink_links=18,
            pcie_gen=5,
            pcie_width=16,
            peak_bf16_tflops=989.4,
        ),
        GpuModel(
            name="A100",
            product="NVIDIA-A100-SXM4-80GB",
            nvml_names=("NVIDIA A100-SXM4-80GB",),
            memory_mib=81920,
            nvlink_links=12,
            pcie_gen=4,
            pcie_width=16,
            peak_bf16_tflops=312.0,
        ),
    )
}


class UnknownGpuModelError(ValueError):
    """Raised for a GPU model name that is not in :data:`MODELS`."""


def get_model(name: str) -> GpuModel:
    """Look a model up by short name, case-insensitively."""
    model = MODELS.get(name.upper())
    if model is None:
        known = ", ".join(sorted(MODELS))
        raise UnknownGpuModelError(f"unknown GPU model {name!r}; known models: {known}")
    return model

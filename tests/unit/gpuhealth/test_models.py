"""The GPU model table: every SKU's NVML and GFD spellings resolve to its own
row, near misses are unknown, and probes on an unknown model never pass."""

from __future__ import annotations

import dataclasses

import pytest

from gpuhealth.active.probes import SUITES
from gpuhealth.active.sim import SimProbes
from gpuhealth.backends.sim import SimBackend
from gpuhealth.checks import Expectations
from gpuhealth.models import (
    MODELS,
    UnknownGpuModelError,
    get_model,
    model_for_nvml_name,
    model_for_product,
    require_model_for_nvml_name,
)
from gpuhealth.report import CheckStatus, GpuIdentity
from gpuhealth.runner import Checker
from gpuhealth.samples import GpuSample, NodeSample

# (short name, NVML name as nvidia-smi prints it, GPU Feature Discovery product label)
SKUS = [
    ("H100", "NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
    ("H100-PCIE", "NVIDIA H100 PCIe", "NVIDIA-H100-PCIe"),
    ("H100-NVL", "NVIDIA H100 NVL", "NVIDIA-H100-NVL"),
    ("H200", "NVIDIA H200", "NVIDIA-H200"),
    ("H200-NVL", "NVIDIA H200 NVL", "NVIDIA-H200-NVL"),
    ("A100", "NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"),
    ("A100-40GB", "NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"),
    ("A100-PCIE-40GB", "NVIDIA A100-PCIE-40GB", "NVIDIA-A100-PCIE-40GB"),
    ("A100-PCIE-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA-A100-80GB-PCIe"),
]


@pytest.mark.parametrize(("name", "nvml", "product"), SKUS, ids=[s[0] for s in SKUS])
def test_each_spelling_resolves_to_its_own_row(name: str, nvml: str, product: str) -> None:
    model = get_model(name)
    assert model.name == name
    assert model_for_nvml_name(nvml) is model
    assert model_for_nvml_name(f"  {nvml}\n") is model
    assert require_model_for_nvml_name(nvml) is model
    assert model_for_product(product) is model
    assert get_model(name.lower()) is model


def test_the_table_is_exactly_the_known_skus() -> None:
    assert sorted(MODELS) == sorted(s[0] for s in SKUS)


@pytest.mark.parametrize(
    "nvml",
    [
        "NVIDIA H100",
        "NVIDIA H100 80GB",
        "NVIDIA H100 PCIe 80GB",
        "nvidia h100 pcie",
        "NVIDIA H200 NVL 141GB",
        "NVIDIA A100",
        "NVIDIA A100-SXM4",
        "NVIDIA A100-PCIE-80GB",
        "NVIDIA H100-PCIe",
        "",
    ],
)
def test_a_near_miss_is_an_unknown_model(nvml: str) -> None:
    assert model_for_nvml_name(nvml) is None
    with pytest.raises(UnknownGpuModelError, match=r"^unknown GPU model .*; known: ") as raised:
        require_model_for_nvml_name(nvml)
    message = str(raised.value)
    assert f"unknown GPU model {nvml.strip()!r}" in message
    for _, known, _ in SKUS:
        assert known in message


def test_gfd_labels_are_the_nvml_names_with_dashes_and_unique() -> None:
    names = [n for m in MODELS.values() for n in m.nvml_names]
    products = [m.product for m in MODELS.values()]
    assert len(set(names)) == len(names)
    assert len(set(products)) == len(products)
    for model in MODELS.values():
        assert model.product == model.nvml_names[0].replace(" ", "-")
        assert model_for_product(model.product.replace("-", " ")) is None


# The ratios of each family's SXM row, as the comment above the table states them.
FAMILY_RATIOS = {
    "H100": (600 / 989.4, 2400 / 3350),
    "H200": (600 / 989.4, 3400 / 4800),
    "A100": (230 / 312, 1500 / 2039),
}
PCIE_RATIO = 0.625
X16_PER_DIRECTION_GBPS = {4: 32, 5: 64}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_floors_keep_the_family_ratios(name: str) -> None:
    model = MODELS[name]
    gemm_ratio, hbm_ratio = FAMILY_RATIOS[name.split("-", maxsplit=1)[0]]
    # Rounded down to a multiple of 5: never above the ratio, and at most 5 below it.
    gemm = model.peak_bf16_tflops * gemm_ratio
    hbm = model.hbm_peak_gbps * hbm_ratio
    assert gemm - 5 < model.gemm_floor_tflops <= gemm + 1e-6
    assert hbm - 5 < model.hbm_floor_gbps <= hbm + 1e-6
    pcie = PCIE_RATIO * X16_PER_DIRECTION_GBPS[model.pcie_gen]
    assert model.pcie_floor_gbps == pcie
    assert model.nccl_intra_floor_gbps >= pcie
    assert model.nccl_inter_floor_gbps_per_nic == {5: 46, 4: 22}[model.pcie_gen]


def test_pcie_skus_do_not_get_sxm_floors() -> None:
    sxm, pcie = get_model("H100"), model_for_nvml_name("NVIDIA H100 PCIe")
    assert pcie is not None
    assert pcie.gemm_floor_tflops < sxm.gemm_floor_tflops
    assert pcie.hbm_floor_gbps < sxm.hbm_floor_gbps
    assert pcie.nccl_intra_floor_gbps < sxm.nccl_intra_floor_gbps


class RenamedBackend(SimBackend):
    """Simulated GPUs that report another NVML name; GPU ``lost`` answers as lost."""

    def __init__(self, nvml_name: str, *, lost: int | None = None, model: str = "H100") -> None:
        super().__init__(node="n1", model=get_model(model))
        self.nvml_name = nvml_name
        self.lost = lost

    def identity(self, index: int) -> GpuIdentity:
        return super().identity(index).model_copy(update={"model": self.nvml_name})

    def sample(self) -> NodeSample:
        sample = super().sample()
        gpus = tuple(
            GpuSample(identity=GpuIdentity(index=g.identity.index), lost=True)
            if g.identity.index == self.lost
            else g
            for g in sample.gpus
        )
        return dataclasses.replace(sample, gpus=gpus)


@pytest.mark.parametrize("suite", ["quick", "full"])
def test_probes_on_an_unknown_model_are_errors_not_passes(suite: str) -> None:
    backend = RenamedBackend("NVIDIA H100")
    report = Checker(backend=backend, node="n1", expect=Expectations(gpus=8)).run(
        suite=suite, probes=SimProbes(backend)
    )
    probes = [c for c in report.checks if c.name in SUITES["full"]]
    per_gpu = [p for p in SUITES[suite] if p != "nccl-allreduce"]
    expected: set[tuple[str, int | None]] = {(p, g) for p in per_gpu for g in range(8)}
    if "nccl-allreduce" in SUITES[suite]:
        expected.add(("nccl-allreduce", None))
    assert {(c.name, c.gpu) for c in probes} == expected
    for probe in probes:
        assert probe.status is CheckStatus.ERROR
        assert probe.message.startswith("unknown GPU model 'NVIDIA H100'; known: ")
        assert "NVIDIA H100 PCIe" in probe.message
        assert probe.threshold is None
    assert report.healthy  # could not check is not evidence against the GPU


def test_an_h100_pcie_node_is_judged_by_pcie_floors() -> None:
    backend = SimBackend(node="n1", model=get_model("H100-PCIE"))
    report = Checker(backend=backend, node="n1", expect=Expectations(gpus=8)).run(
        suite="full", probes=SimProbes(backend)
    )
    gemm = [c for c in report.checks if c.name == "gemm"]
    assert len(gemm) == 8
    assert {c.threshold for c in gemm} == {get_model("H100-PCIE").gemm_floor_tflops}
    assert all(c.status is CheckStatus.PASS for c in gemm)
    assert report.healthy


def test_a_lost_first_gpu_does_not_hide_the_model() -> None:
    backend = RenamedBackend("NVIDIA H100 PCIe", lost=0, model="H100-PCIE")
    report = Checker(backend=backend, node="n1", expect=Expectations(gpus=8)).run(
        suite="quick", probes=SimProbes(backend)
    )
    gemm = {c.gpu: c for c in report.checks if c.name == "gemm"}
    assert set(gemm) == set(range(1, 8))
    assert all(c.status is CheckStatus.PASS for c in gemm.values())
    assert {c.threshold for c in gemm.values()} == {get_model("H100-PCIE").gemm_floor_tflops}


def test_mixed_models_on_one_node_are_not_judged_by_either() -> None:
    class Mixed(SimBackend):
        def identity(self, index: int) -> GpuIdentity:
            name = "NVIDIA H100 PCIe" if index else "NVIDIA H100 80GB HBM3"
            return super().identity(index).model_copy(update={"model": name})

    backend = Mixed(node="n1", model=get_model("H100"))
    report = Checker(backend=backend, node="n1").run(suite="quick", probes=SimProbes(backend))
    probes = [c for c in report.checks if c.name in ("gemm", "hbm")]
    assert len(probes) == 16
    assert all(c.status is CheckStatus.ERROR for c in probes)
    assert "GPUs report different models" in probes[0].message

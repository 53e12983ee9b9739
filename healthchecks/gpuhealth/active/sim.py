"""Probe results for simulated GPUs: healthy values a little above the model's
floors, scaled down by ``slow-*`` faults, a downtrained PCIe link or NVLink
links that are down, the way the real numbers move. A ``probe-error`` fault
makes a probe raise, the way a crashed benchmark does."""

from __future__ import annotations

from gpuhealth import faults as f
from gpuhealth.backends.sim import IB_PORTS, SimBackend

HEADROOM = 1.15


class SimProbes:
    name = "sim"

    def __init__(self, backend: SimBackend) -> None:
        self.backend = backend
        self.model = backend.model

    def _factor(self, kind: type[f.SlowGemm] | type[f.SlowHbm], gpu: int) -> float:
        slow = [
            float(x.factor) for x in self.backend.faults if isinstance(x, kind) and x.gpu == gpu
        ]
        return max(slow, default=1.0)

    def _crash(self, probe: str, gpu: int | None) -> None:
        for x in self.backend.faults:
            if (
                isinstance(x, f.ProbeError)
                and x.probe == probe
                and (x.gpu is None or gpu is None or x.gpu == gpu)
            ):
                where = "" if gpu is None else f" on GPU {gpu}"
                raise RuntimeError(f"simulated {probe} probe crash{where}")

    def gemm_tflops(self, gpu: int) -> float:
        self._crash("gemm", gpu)
        return self.model.gemm_floor_tflops * HEADROOM / self._factor(f.SlowGemm, gpu)

    def hbm_gbps(self, gpu: int) -> float:
        self._crash("hbm", gpu)
        return self.model.hbm_floor_gbps * HEADROOM / self._factor(f.SlowHbm, gpu)

    def h2d_gbps(self, gpu: int) -> float:
        self._crash("pcie-bandwidth", gpu)
        healthy = self.model.pcie_floor_gbps * HEADROOM
        for x in self.backend.faults:
            if isinstance(x, f.PcieDowntrain) and x.gpu == gpu:
                lane_rate = 2.0 ** (x.gen - self.model.pcie_gen)
                return healthy * lane_rate * x.width / self.model.pcie_width
        return healthy

    def allreduce_busbw_gbps(self) -> float:
        self._crash("nccl-allreduce", None)
        healthy = self.model.nccl_intra_floor_gbps * 1.04
        slow = max(
            (x.factor for x in self.backend.faults if isinstance(x, f.SlowNccl)), default=1.0
        )
        links = self.model.nvlink_links
        down = max(
            (
                sum(1 for y in self.backend.faults if isinstance(y, f.NvlinkDown) and y.gpu == g)
                for g in range(self.backend.gpu_count)
            ),
            default=0,
        )
        if self.backend.gpu_count < 2:
            return 0.0  # busbw's 2(n-1)/n: nothing crosses a link, as on real hardware
        return healthy / slow * (links - down) / links

    def internode_busbw_gbps(self, nics: int) -> float:
        """This node's share of a multi-node all-reduce: every NIC at the model's
        per-NIC rate, scaled by the share of ports up, slowed by ``slow-nccl``."""
        healthy = self.model.nccl_inter_floor_gbps_per_nic * nics * 1.04
        down = {x.port for x in self.backend.faults if isinstance(x, f.IbPortDown)}
        slow = max(
            (x.factor for x in self.backend.faults if isinstance(x, f.SlowNccl)), default=1.0
        )
        return healthy * (IB_PORTS - len(down)) / IB_PORTS / slow

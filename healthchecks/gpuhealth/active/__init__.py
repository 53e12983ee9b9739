"""Active probes: tests that need the node's GPUs to themselves.

They run in a probe Job (or a burn-in bench), never beside a training job.
Implementations: :mod:`~gpuhealth.active.sim` for simulated nodes,
:mod:`~gpuhealth.active.torch_probes` (PyTorch, optional extra
``pitcrew-operator[active]``: one distribution holds both packages) and
:mod:`~gpuhealth.active.nccl_tests` (NVIDIA's ``all_reduce_perf``,
preferred for all-reduce when it is on PATH).
"""

from gpuhealth.active.probes import (
    ProbeFailedError,
    Probes,
    ProbeUnavailableError,
    run_probes,
)

__all__ = ["ProbeFailedError", "ProbeUnavailableError", "Probes", "run_probes"]

"""NVLink fabric registration on NVSwitch boards (Hopper and later).

On an HGX board the GPUs reach each other through NVSwitches, and the
fabric manager (``nvidia-fabricmanager``) must register every GPU with the
fabric before CUDA can use NVLink: until it does, jobs fail to start or run
over PCIe at a fraction of the bandwidth, while every other passive check
passes. NVML reports each GPU's registration (``nvmlDeviceGetGpuFabricInfo``):
``completed`` with success is healthy. Registration takes seconds to minutes
after boot, so ``not-started``/``in-progress`` is watched for
``fabric.registration_grace_s`` and fatal after it (the fabric manager is
not running, or failed); ``completed`` with an error is fatal at once. A
reboot is the repair: it restarts the fabric manager and retrains the links.
"""

from __future__ import annotations

from gpuhealth.checks.context import CheckContext, result, unread
from gpuhealth.report import CheckResult, CheckStatus, FaultClass, RecommendedAction

FATAL, REBOOT = FaultClass.FATAL, RecommendedAction.REBOOT


def check_fabric(ctx: CheckContext) -> list[CheckResult]:
    grace = ctx.thresholds["fabric.registration_grace_s"]
    pending = ctx.memory.fabric_pending_since
    results = []
    for gpu in ctx.sample.gpus:
        index = gpu.identity.index
        if failed := unread("fabric", gpu, "fabric"):
            results.append(failed)
            continue
        if gpu.fabric_state is None:
            pending.pop(index, None)
            results.append(
                result("fabric", CheckStatus.SKIPPED, gpu=index, message="no NVLink fabric")
            )
        elif gpu.fabric_state == "completed":
            pending.pop(index, None)
            if gpu.fabric_error:
                results.append(
                    result(
                        "fabric",
                        CheckStatus.FAIL,
                        gpu=index,
                        fault_class=FATAL,
                        action=REBOOT,
                        message=f"NVLink fabric registration failed: {gpu.fabric_error}",
                    )
                )
            else:
                results.append(result("fabric", CheckStatus.PASS, gpu=index, message="registered"))
        else:
            since = pending.setdefault(index, ctx.now)
            waited = (ctx.now - since).total_seconds()
            late = waited >= grace
            results.append(
                result(
                    "fabric",
                    CheckStatus.FAIL if late else CheckStatus.WARN,
                    gpu=index,
                    observed=round(waited),
                    threshold=grace,
                    unit="s",
                    fault_class=FATAL if late else FaultClass.WATCH,
                    action=REBOOT if late else RecommendedAction.NONE,
                    message=(
                        f"NVLink fabric registration {gpu.fabric_state} for {waited:.0f}s"
                        + (": is the fabric manager running?" if late else "")
                    ),
                )
            )
    return results

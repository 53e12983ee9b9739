"""GPU links: PCIe generation/width and replays, NVLink state and error rates.

A PCIe link that trained at lower *width* (x8 instead of x16) is a hardware
fault that halves host-device bandwidth. A lower *generation* alone is
reported as a warning: GPUs drop the link generation at idle to save power,
so only the PCIe bandwidth probe under load can confirm it. NVLink links that
are down, or one link with a storm of CRC/replay/recovery errors, degrade
every collective through that GPU.
"""

from __future__ import annotations

from gpuhealth.checks.context import CheckContext, result, unread
from gpuhealth.report import CheckResult, CheckStatus, FaultClass, RecommendedAction

PASS, WARN, FAIL, SKIPPED = (
    CheckStatus.PASS,
    CheckStatus.WARN,
    CheckStatus.FAIL,
    CheckStatus.SKIPPED,
)


def check_pcie(ctx: CheckContext) -> list[CheckResult]:
    results = []
    replay_warn = ctx.thresholds["pcie.replay_per_min_warn"]
    for gpu in ctx.sample.gpus:
        index = gpu.identity.index
        if failed := unread("pcie", gpu, "pcie"):
            results.append(failed)
            continue
        gen, width = gpu.pcie_gen, gpu.pcie_width
        max_gen, max_width = gpu.pcie_max_gen, gpu.pcie_max_width
        if gen is None or width is None or max_gen is None or max_width is None:
            results.append(result("pcie", SKIPPED, gpu=index, message="PCIe link not reported"))
            continue
        link = f"gen{gen} x{width} (max gen{max_gen} x{max_width})"
        findings = []
        if width < max_width:
            findings.append(
                result(
                    "pcie",
                    FAIL,
                    gpu=index,
                    observed=width,
                    threshold=max_width,
                    unit="lanes",
                    fault_class=FaultClass.DEGRADED,
                    action=RecommendedAction.REBOOT,
                    message=f"PCIe link downtrained: {link}",
                )
            )
        elif gen < max_gen:
            findings.append(
                result(
                    "pcie",
                    WARN,
                    gpu=index,
                    observed=gen,
                    threshold=max_gen,
                    unit="gen",
                    fault_class=FaultClass.WATCH,
                    message=f"PCIe below max generation (idle power saving?): {link}",
                )
            )
        if gpu.pcie_replay is not None:
            rate = ctx.rate_per_minute(("pcie-replay", index), gpu.pcie_replay)
            if rate is not None and rate > replay_warn:
                findings.append(
                    result(
                        "pcie",
                        WARN,
                        gpu=index,
                        observed=round(rate, 1),
                        threshold=replay_warn,
                        unit="replays/min",
                        fault_class=FaultClass.WATCH,
                        message=f"PCIe replay rate high: marginal link ({link})",
                    )
                )
        results.extend(
            findings
            or [result("pcie", PASS, gpu=index, observed=width, unit="lanes", message=link)]
        )
    return results


def check_nvlink(ctx: CheckContext) -> list[CheckResult]:
    warn = ctx.thresholds["nvlink.errors_per_min_warn"]
    fail = ctx.thresholds["nvlink.errors_per_min_fail"]
    expected = ctx.expect.model.nvlink_links if ctx.expect.model else None
    results = []
    for gpu in ctx.sample.gpus:
        index = gpu.identity.index
        if failed := unread("nvlink", gpu, "nvlink"):
            results.append(failed)
            continue
        if not gpu.nvlinks and len(ctx.sample.gpus) < 2:
            # One SXM GPU passed through to a VM: NVML reports no links (seen on a
            # single-H200 machine), and there is no peer a link could reach.
            results.append(result("nvlink", SKIPPED, gpu=index, message="one GPU: no NVLink peers"))
            continue
        if not gpu.nvlinks:
            results.append(
                result(
                    "nvlink",
                    FAIL if expected else SKIPPED,
                    gpu=index,
                    observed=0,
                    threshold=expected,
                    fault_class=FaultClass.DEGRADED,
                    action=RecommendedAction.RESET_GPU,
                    message="no NVLink links reported",
                )
            )
            continue
        findings = []
        down = [link.link for link in gpu.nvlinks if not link.active]
        if down:
            findings.append(
                result(
                    "nvlink",
                    FAIL,
                    gpu=index,
                    observed=len(down),
                    threshold=0,
                    unit="links down",
                    fault_class=FaultClass.DEGRADED,
                    action=RecommendedAction.RESET_GPU,
                    message=f"NVLink links down: {down}",
                )
            )
        worst_rate, worst_link = 0.0, None
        for link in gpu.nvlinks:
            total = link.crc_errors + link.replay_errors + link.recovery_errors
            rate = ctx.rate_per_minute(("nvlink", index, link.link), total)
            if rate is not None and rate > worst_rate:
                worst_rate, worst_link = rate, link.link
        if worst_rate > fail:
            findings.append(
                result(
                    "nvlink",
                    FAIL,
                    gpu=index,
                    observed=round(worst_rate, 1),
                    threshold=fail,
                    unit="errors/min",
                    fault_class=FaultClass.DEGRADED,
                    action=RecommendedAction.RESET_GPU,
                    message=f"NVLink error storm on link {worst_link}",
                )
            )
        elif worst_rate > warn:
            findings.append(
                result(
                    "nvlink",
                    WARN,
                    gpu=index,
                    observed=round(worst_rate, 1),
                    threshold=warn,
                    unit="errors/min",
                    fault_class=FaultClass.WATCH,
                    message=f"NVLink errors on link {worst_link}",
                )
            )
        results.extend(
            findings or [result("nvlink", PASS, gpu=index, observed=len(gpu.nvlinks), unit="links")]
        )
    return results

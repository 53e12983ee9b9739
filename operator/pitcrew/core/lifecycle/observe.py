"""What every decision notes before its phase's handler runs: the evidence itself.

Conditions about the agent and its checks (is it reporting, could its checks
run, could it read the kernel log), the application and watch findings on a
timer, and the check configuration the agent must run. None of it moves the
phase; all of it is true whatever the phase is.
"""

from __future__ import annotations

import datetime

from gpuhealth.report import CheckStatus, FaultClass
from pitcrew.api.gpunode import WatchedFinding
from pitcrew.api.meta import ConditionStatus
from pitcrew.core import actions as a
from pitcrew.core.agent_config import agent_checks
from pitcrew.core.evidence import WATCH_ESCALATES_AFTER
from pitcrew.core.lifecycle.builder import Builder
from pitcrew.core.lifecycle.facts import KERNEL_LOG_CHECK, could_not_check

HEARTBEAT_MISSES = 3
"""Heartbeat intervals without a report before the agent counts as not reporting."""
WATCHED_CLASSES = (FaultClass.APPLICATION, FaultClass.WATCH)


def publish_checks(b: Builder) -> None:
    """Publish the policy's checks to the agent when they differ from what it runs."""
    desired = agent_checks(b.policy, b.state.node)
    if b.state.checks != desired:
        message = f"checks of policy {b.policy.name}: every {desired.interval}"
        if b.state.checks is not None:
            message += f" (was policy {b.state.checks.policy}, every {b.state.checks.interval})"
        b.actions.append(a.PublishChecks(checks=desired, message=message))


def watch(b: Builder) -> None:
    """Keep, for each application or watch finding of the latest report, the time it
    was first seen, and mark the ones that outlived ``WATCH_ESCALATES_AFTER``."""
    seen = {(w.check, w.gpu): w.since for w in b.status.watching}
    watching = []
    for c in b.status.checks.results:
        if c.status is not CheckStatus.FAIL or c.fault_class not in WATCHED_CLASSES:
            continue
        since = seen.get((c.name, c.gpu), b.now)
        b.wake(since + WATCH_ESCALATES_AFTER)
        watching.append(
            WatchedFinding(
                check=c.name,
                gpu=c.gpu,
                since=since,
                escalated=b.now - since >= WATCH_ESCALATES_AFTER,
            )
        )
    if watching != b.status.watching:
        b.set(watching=watching[:64])


def observe(b: Builder) -> None:
    """Conditions about the evidence itself: agent heartbeat, checks that could not run."""
    watch(b)
    status, spec = b.status, b.policy.spec
    if could_not_check(status):
        errors = [c for c in status.checks.results if c.status is CheckStatus.ERROR]
        b.condition(
            "ChecksRunnable",
            ConditionStatus.FALSE,
            "ChecksCouldNotRun",
            "; ".join(f"{c.name}: {c.message}" for c in errors)[:1000],
        )
    else:
        b.condition("ChecksRunnable", ConditionStatus.TRUE, "ChecksRan")
    unread = [c for c in status.checks.results if c.name == KERNEL_LOG_CHECK]
    if unread:
        # The events of the lines it could read are judged as usual; an Xid in a line
        # it could not read may be unseen, which an SRE must know.
        b.condition(
            "KernelLogRead",
            ConditionStatus.FALSE,
            "LinesUnreadable",
            "; ".join(c.message for c in unread)[:1000],
        )
    else:
        b.condition("KernelLogRead", ConditionStatus.TRUE, "Read")
    if status.last_heartbeat is None:
        b.condition("AgentReporting", ConditionStatus.UNKNOWN, "NoReportYet")
    elif _missed(b, status.last_heartbeat + spec.checks.heartbeat * HEARTBEAT_MISSES):
        b.condition(
            "AgentReporting",
            ConditionStatus.FALSE,
            "HeartbeatMissing",
            f"no agent report since {status.last_heartbeat.isoformat()}",
        )
    else:
        b.condition("AgentReporting", ConditionStatus.TRUE, "Reporting")


def _missed(b: Builder, due: datetime.datetime) -> bool:
    """Whether the agent's report is overdue; until then ``due`` is the decision's
    ``report_due``."""
    if due > b.now:
        b.report_due = due
    return b.now > due

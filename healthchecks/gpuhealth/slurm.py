"""``gpuhealth slurm``: the node's checks as Slurm's ``HealthCheckProgram`` or prolog,
what NHC does for CPU clusters.

Slurm runs the health check every ``HealthCheckInterval`` on each node and leaves
the draining to it; it runs the prolog before each job and drains the node itself
(reason "Prolog error") and requeues the job when the prolog exits non-zero. So:

- A failure that takes a GPU out of service (a fatal or degraded finding) drains
  the Slurm node with the finding as its reason, ``gpuhealth: <check> gpu<n>:
  <message>``, and exits 1; in the prolog that also requeues the job, which then
  runs elsewhere instead of on a broken GPU.
- A check that could not run (NVML missing, a probe that crashed) is no evidence
  against the node: nothing is drained. The health check exits 2 and says so on
  stderr; the prolog exits 0, because Slurm would drain the node for it.
- All passing: a drain whose reason is gpuhealth's own is resumed (the fault
  cleared, a repair took), exit 0, unless Slurm also has the node DOWN or FAIL.
- The node is read first (``scontrol -o show node``): one already out of service
  (DRAIN, FAIL or DOWN) for another reason (a person, Slurm, Pitcrew) is never
  touched, failing or passing: draining it again would replace that reason with
  gpuhealth's, and the next passing check would resume it. A node whose state
  cannot be read is not touched either. Between the read and the update someone
  may still drain the node (``scontrol`` has no compare-and-set): a window of
  milliseconds, not of a check interval.

Slurm is reached with its own ``scontrol``; the node is ``$SLURMD_NODENAME`` (set
by slurmd for the prolog) or ``--node-name``.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Sequence

from gpuhealth.errors import GpuhealthError
from gpuhealth.report import CheckResult, CheckStatus, FaultClass, Report

REASON_PREFIX = "gpuhealth: "
"""A drain with this reason is gpuhealth's: the only one it resumes."""
REASON_LIMIT = 200
TAKES_OUT = (FaultClass.FATAL, FaultClass.DEGRADED)
OUT = frozenset({"DRAIN", "DRAINING", "DRAINED", "FAIL", "FAILING", "DOWN"})
"""States and flags of a node out of Slurm's service: gpuhealth drains over none of
them unless the reason is its own."""
NOT_RESUMED = frozenset({"DOWN", "FAIL", "FAILING"})
"""A node gpuhealth drained that is also DOWN or FAILing (slurmctld keeps the reason
when it marks a node DOWN): RESUME would undo Slurm's state, not only gpuhealth's."""
EXIT_HEALTHY, EXIT_DRAINED, EXIT_CANNOT_RUN = 0, 1, 2


class SlurmCommandError(GpuhealthError, RuntimeError):
    """``scontrol`` failed; the message is its own."""


def node_name(given: str | None) -> str:
    """The Slurm node this runs on: ``--node-name``, else ``$SLURMD_NODENAME``, else
    the short host name (Slurm's default NodeName)."""
    return given or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def drain_reason(checks: Sequence[CheckResult]) -> str:
    """The reason to drain for, from the worst findings; empty when none takes a GPU
    out of service."""
    failing = [c for c in checks if c.status is CheckStatus.FAIL and c.fault_class in TAKES_OUT]
    if not failing:
        return ""
    failing.sort(key=lambda c: (c.fault_class is not FaultClass.FATAL, c.name, c.gpu or 0))
    first = failing[0]
    where = f" gpu{first.gpu}" if first.gpu is not None else ""
    more = f" (+{len(failing) - 1} more)" if len(failing) > 1 else ""
    text = f"{REASON_PREFIX}{first.name}{where}: {first.message}".rstrip(": ")
    # One line: a reason is shown in one sinfo column and parsed by people's scripts.
    text = re.sub(r"\s+", " ", text)
    return text[: REASON_LIMIT - len(more)] + more


def act(report: Report, *, node: str, mode: str, scontrol: str = "scontrol") -> int:
    """Drain or resume ``node`` as ``report`` says; the exit status for ``mode``
    (``healthcheck`` or ``prolog``). The node is read first: one out of service for
    another reason is left as it is (Slurm's update would replace that reason with
    gpuhealth's, and the next passing check would resume it)."""
    reason = drain_reason(report.checks)
    errors = sorted({c.name for c in report.checks if c.status is CheckStatus.ERROR})
    try:
        state, current = node_state(scontrol, node)
    except SlurmCommandError as error:
        # Unknown state: touching it could undo someone's drain. Still a failure: the
        # prolog's exit drains the node (Slurm's own reason) and requeues the job.
        said = reason or (f"could not run {', '.join(errors)}" if errors else "checks passed")
        print(f"gpuhealth: {said}; could not read {node}: {error}", file=sys.stderr)
        if reason:
            return EXIT_DRAINED
        return EXIT_HEALTHY if mode == "prolog" else EXIT_CANNOT_RUN
    ours = current.startswith(REASON_PREFIX)
    out = not OUT.isdisjoint(state_words(state))
    if reason and out and not ours:
        print(
            f"gpuhealth: {reason}; {node} is already {state} ({current or 'no reason'}): "
            "left as it is",
            file=sys.stderr,
        )
        return EXIT_DRAINED
    if reason:
        try:
            _scontrol(scontrol, "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")
            print(f"gpuhealth: drained {node}: {reason}", file=sys.stderr)
        except SlurmCommandError as error:
            # Still a failure: the prolog's exit drains the node and requeues the job.
            print(f"gpuhealth: {reason}; could not drain {node}: {error}", file=sys.stderr)
        return EXIT_DRAINED
    if errors:
        print(
            f"gpuhealth: could not run {', '.join(errors)}: {node} left as it is", file=sys.stderr
        )
        return EXIT_HEALTHY if mode == "prolog" else EXIT_CANNOT_RUN
    if ours and "DRAIN" in state_words(state) and NOT_RESUMED.isdisjoint(state_words(state)):
        _scontrol(scontrol, "update", f"NodeName={node}", "State=RESUME")
        print(f"gpuhealth: resumed {node} (was: {current})", file=sys.stderr)
    return EXIT_HEALTHY


def state_words(state: str) -> set[str]:
    """The base state and flags of ``State=`` (``MIXED+DRAIN`` -> MIXED, DRAIN), without
    the marks sinfo-style output adds (``*``, ``~``...)."""
    return {w.strip("*~#!%$@^-") for w in state.upper().split("+") if w}


def node_state(scontrol: str, node: str) -> tuple[str, str]:
    """``State=`` and ``Reason=`` of ``scontrol -o show node``: the one-line form,
    the same in every Slurm release; Reason is last, with ``[user@time]`` after it."""
    return parse_node_line(_scontrol(scontrol, "-o", "show", "node", node))


def parse_node_line(shown: str) -> tuple[str, str]:
    """``State=`` and ``Reason=`` of one ``scontrol -o show node`` line."""
    state = re.search(r"(?:^| )State=(\S+)", shown)
    reason = re.search(r" Reason=(.*?)(?: \[[^\]]*\])?\s*$", shown)
    return (state.group(1) if state else ""), (reason.group(1) if reason else "")


def _scontrol(scontrol: str, *args: str) -> str:
    try:
        done = subprocess.run(
            [scontrol, *args], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SlurmCommandError(f"{scontrol} {args[0]}: {error}") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()[:300]
        raise SlurmCommandError(f"{scontrol} {' '.join(args[:3])}: {said}")
    return done.stdout

"""The node agent: gpuhealth checks in, GPUNode status out, as few writes as possible.

One agent runs per GPU node (a DaemonSet). Every ``interval`` it runs the
passive suite; it writes ``GPUNode.status`` (its own fields, by server-side
apply as ``pitcrew-agent``) only when the findings changed
(:mod:`pitcrew.node.findings`), or when the last write is older than
``heartbeat``, which proves it is alive. A 4,000-node fleet at the defaults
(30 s checks, 5 min heartbeat) writes about 13 times a second in total,
almost all heartbeats, instead of 133. A sweep that failed as a whole (the
driver did not answer) is retried at the next sweep and written only when
the heartbeat is due, so one hiccup never replaces the node's findings.

A critical XID (NVML event or kernel log line, see ``wait_for_xid``) makes a
sweep run at once instead of waiting for the interval. Before each sweep the
agent reads its Node's ``pitcrew.dev/last-remediation`` annotation; a new one
makes it forget latched XIDs (the repair is judged by fresh evidence).

A GPU reset needs the GPUs free of every process, and NVML handles keep
``/dev/nvidia*`` open. When the operator records a reset-gpu rung on the GPUNode
(``status.remediation``, its own field), the agent closes NVML
(``Backend.release``), pauses its sweeps and says so in ``status.checks.released``;
the operator creates the reset Job only then (or after a bounded wait for an agent that
does not answer). Once the rung is over (its evidence seen, an error, the next rung,
no rung) the agent opens NVML again, trying again with a backoff while the driver
comes back; a GPU the reset lost is reported by the next sweep, as any lost GPU.

:class:`AgentCore` is the per-node logic shared by the real agent and the
simulated agents (:mod:`pitcrew.dev.agents`).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from kubernetes import client
from prometheus_client import Counter, Gauge, start_http_server

from gpuhealth.backends.base import BackendUnavailableError
from gpuhealth.backends.sim import SimBackend
from gpuhealth.checks import Expectations
from gpuhealth.errors import GpuhealthError
from gpuhealth.kernel_log import KernelLog
from gpuhealth.models import GpuModel, get_model
from gpuhealth.report import CheckResult, CheckStatus, Report
from gpuhealth.runner import Checker
from pitcrew.api.gpunode import AgentChecks, ChecksStatus, GPUNodeStatus, GpuStatus
from pitcrew.api.vocabulary import AGENT_MANAGER, LAST_REMEDIATION
from pitcrew.core.convert import gpu_capacity, gpu_model, pending_reset, published_checks
from pitcrew.kube import gpunodes
from pitcrew.kube.client import api_client, to_dict
from pitcrew.node.findings import Verdicts, fingerprint, verdicts

logger = logging.getLogger(__name__)
Clock = Callable[[], datetime.datetime]

GPU_TEMPERATURE = Gauge("pitcrew_gpu_temperature_celsius", "GPU temperature.", ["node", "gpu"])
GPU_POWER = Gauge("pitcrew_gpu_power_watts", "GPU power draw.", ["node", "gpu"])
GPU_HEALTHY = Gauge("pitcrew_gpu_healthy", "1 when no check fails on the GPU.", ["node", "gpu"])
CHECK_FAILURES = Gauge(
    "pitcrew_agent_failing_checks", "Failing checks in the last sweep.", ["node", "check"]
)
STATUS_WRITES = Counter(
    "pitcrew_agent_status_writes_total", "GPUNode status writes.", ["node", "why"]
)


REACQUIRE_FIRST = datetime.timedelta(seconds=5)
"""The first wait before NVML is opened again after a failed try (a driver still
re-initialising the GPUs after a reset); it doubles up to :data:`REACQUIRE_MOST`."""
REACQUIRE_MOST = datetime.timedelta(minutes=5)


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def agent_status(report: Report, checker: Checker, *, repair: str = "") -> GPUNodeStatus:
    """The agent-owned part of GPUNode status for one report; ``repair`` is the confirmed
    repair the report comes after (the operator judges a rung by it)."""
    failing_gpus = {c.gpu for c in report.checks if c.status is CheckStatus.FAIL}
    sample = checker.last_sample
    readings = {g.identity.index: g for g in sample.gpus} if sample else {}
    gpus = [
        GpuStatus(
            **identity.model_dump(),
            healthy=identity.index not in failing_gpus,
            temperature_c=getattr(readings.get(identity.index), "temperature_c", None),
            power_w=getattr(readings.get(identity.index), "power_w", None),
        )
        for identity in report.gpus
    ]
    return GPUNodeStatus(
        checks=ChecksStatus(
            report_time=report.time,
            backend=report.backend,
            suite=report.suite,
            results=report.checks,
            repair=repair,
        ),
        gpus=gpus,
        gpu_count=len(gpus),
        healthy_gpus=sum(1 for g in gpus if g.healthy),
        last_heartbeat=report.time,
    )


class AgentCore:
    def __init__(
        self,
        *,
        api: client.ApiClient,
        node: str,
        node_uid: str,
        checker: Checker,
        heartbeat: datetime.timedelta,
        interval: datetime.timedelta = datetime.timedelta(seconds=30),
        clock: Clock = utc_now,
    ) -> None:
        self.api, self.node, self.node_uid = api, node, node_uid
        self.checker = checker
        self.heartbeat = heartbeat
        self.interval = interval
        """Until the operator publishes the policy's checks, the command line's."""
        self.expect = checker.expect
        """What the node itself says it should look like (model, ports); the policy's
        expected GPU count overrides the count."""
        self.checks: AgentChecks | None = None
        self._followed: int | None = None
        self.clock = clock
        self.last_fingerprint: str | None = None
        self.verdicts: Verdicts = {}
        self.last_status: GPUNodeStatus | None = None
        self.last_write: datetime.datetime | None = None
        self.remediation_key: str | None = None
        self.released = ""
        """The reset rung for which NVML is closed and the sweeps paused; empty when not."""
        self._unsaid = False
        """The release is not written yet (the write failed): the next sweep writes it."""
        self.reacquire_at: datetime.datetime | None = None
        """When to open NVML again after a reset (None: it is open, or closed for one)."""
        self._reacquire_wait = REACQUIRE_FIRST
        self.woken = threading.Event()
        """Set when the loop should not sleep out its interval (NVML to open again)."""
        self._exported_checks: set[str] = set()
        self.lock = threading.Lock()

    def follow(self, gpunode: dict[str, Any]) -> bool:
        """A new version of this node's GPUNode: configure from its ``spec.checks``.
        Every status write (this agent's heartbeat, the operator's) is a watch event;
        only a spec change bumps ``metadata.generation``, so the rest cost nothing."""
        self.note_reset(pending_reset(gpunode))
        generation = gpunode.get("metadata", {}).get("generation")
        if generation is not None and generation == self._followed:
            return False
        self._followed = generation
        checks = published_checks(gpunode)
        return checks is not None and self.configure(checks)

    def configure(self, checks: AgentChecks) -> bool:
        """Run the checks the operator published (``GPUNode.spec.checks``) from the next
        sweep on; True if they changed. A configuration this agent cannot run (a check
        name from a newer operator) is refused whole, and the one it has stays."""
        with self.lock:
            if checks == self.checks:
                return False
            gpus = checks.expected_gpus or self.expect.gpus
            try:
                self.checker.configure(
                    expect=dataclasses.replace(self.expect, gpus=gpus),
                    thresholds=checks.thresholds,
                    disabled=checks.disabled,
                )
            except GpuhealthError as error:
                logger.error("checks of policy %s refused: %s", checks.policy, error)
                return False
            self.interval, self.heartbeat, self.checks = checks.interval, checks.heartbeat, checks
            logger.info("running the checks of policy %s every %s", checks.policy, checks.interval)
            return True

    def note_remediation(self, annotations: dict[str, str]) -> bool:
        """Forget latched findings after a confirmed repair (the operator writes
        ``pitcrew.dev/last-remediation`` only once it has evidence the repair happened);
        True if it is a new one. Reports from now on carry its key."""
        raw = annotations.get(LAST_REMEDIATION)
        try:
            key = json.loads(raw).get("key") if raw else None
        except (ValueError, AttributeError):
            key = None
        if not isinstance(key, str) or key == self.remediation_key:
            return False
        first = self.remediation_key is None and self.last_write is None
        self.remediation_key = key
        # After a restart (a reboot) nothing is latched yet: nothing to forget.
        self.checker.memory.clear_latched()
        return not first

    def note_reset(self, key: str) -> bool:
        """The reset rung the operator recorded (``key``), or none (empty). For a rung,
        close NVML and say so at once; when none is left, open it again from the next
        sweep. True if anything changed."""
        with self.lock:
            if key == self.released:
                return False
            if key:
                if not self.released and self.last_status is None:
                    # Started with a reset pending (restarted mid-rung): one sweep first,
                    # or the status that says "released" would say "no GPUs" with it.
                    report = self.checker.run()
                    repair = self.remediation_key or ""
                    self.last_status = agent_status(report, self.checker, repair=repair)
                if not self.released:
                    self.checker.backend.release()
                    logger.info("reset %s: NVML released, checks paused", key)
                self.released, self.reacquire_at, self._unsaid = key, None, True
                try:
                    self._write_paused(self.clock(), force=True)
                except Exception:
                    logger.exception("reset %s: saying so failed; again at the next sweep", key)
                return True
            logger.info("reset %s over: opening NVML again", self.released)
            self.released, self.reacquire_at = "", self.clock()
            self._reacquire_wait = REACQUIRE_FIRST
            self.last_fingerprint = None  # the first report after a reset is news
            self.woken.set()
            return True

    def _reacquire(self, now: datetime.datetime) -> None:
        """Open NVML again once due; a failure is tried again after a doubling wait, and
        meanwhile the sweep reports that the backend cannot be read (never a crash)."""
        if self.reacquire_at is None or now < self.reacquire_at:
            return
        try:
            self.checker.backend.reacquire()
        except BackendUnavailableError as error:
            self.reacquire_at = now + self._reacquire_wait
            logger.warning("%s; trying again in %s", error, self._reacquire_wait)
            self._reacquire_wait = min(2 * self._reacquire_wait, REACQUIRE_MOST)
            return
        self.reacquire_at = None

    def _write_paused(self, now: datetime.datetime, *, force: bool) -> bool:
        """While NVML is closed for a reset: the last status, saying so, at the heartbeat
        (or at once, ``force``); nothing is sampled."""
        due = self.last_write is None or now - self.last_write >= self.heartbeat
        if not (force or due):
            return False
        last = self.last_status or GPUNodeStatus()
        checks = last.checks.model_copy(update={"released": self.released})
        status = last.model_copy(update={"checks": checks, "last_heartbeat": now})
        self._write(status, why="release" if force else "heartbeat")
        self.last_write, self._unsaid = now, False
        return True

    def _write(self, status: GPUNodeStatus, *, why: str) -> None:
        if self.last_write is None:
            gpunodes.ensure(self.api, node=self.node, node_uid=self.node_uid)
        fields = gpunodes.status_fields(status, gpunodes.AGENT_FIELDS)
        gpunodes.apply_status(self.api, node=self.node, status=fields, manager=AGENT_MANAGER)
        STATUS_WRITES.labels(self.node, why).inc()

    def next_sweep(self) -> datetime.datetime:
        """When the loop sweeps next: after the interval, or when NVML is due to be
        opened again, if that is sooner."""
        due = self.clock() + self.interval
        return min(due, self.reacquire_at) if self.reacquire_at else due

    def tick(self, *, force: bool = False) -> bool:
        """Run the passive sweep; write status if needed. Returns True if it wrote."""
        with self.lock:
            if self.released:
                return self._write_paused(self.clock(), force=force or self._unsaid)
            self._reacquire(self.clock())
            report = self.checker.run()
            status = agent_status(report, self.checker, repair=self.remediation_key or "")
            now = self.clock()
            due = self.last_write is None or now - self.last_write >= self.heartbeat
            repair = self.remediation_key or ""
            if failed_sweep(report):
                if not (due or force):
                    logger.warning(
                        "sweep failed; retrying at the next one: %s", report.checks[0].message
                    )
                    return False
                # Written because the heartbeat is due; the findings stand as they were.
                found, current = self.verdicts, self.last_fingerprint
                status = stale(self.last_status, report) if self.last_status else status
            else:
                self._export(report, status)
                found = verdicts(report.checks, self.verdicts)
                current = fingerprint(found, gpus=(g.index for g in status.gpus), repair=repair)
            changed = current != self.last_fingerprint
            if not (force or changed or due):
                self.verdicts = found
                return False
            self._write(status, why="change" if changed else "heartbeat")
            self.last_fingerprint, self.last_write = current, now
            self.verdicts, self.last_status = found, status
            return True

    def _export(self, report: Report, status: GPUNodeStatus) -> None:
        for gpu in status.gpus:
            index = str(gpu.index)
            GPU_HEALTHY.labels(self.node, index).set(1 if gpu.healthy else 0)
            if gpu.temperature_c is not None:
                GPU_TEMPERATURE.labels(self.node, index).set(gpu.temperature_c)
            if gpu.power_w is not None:
                GPU_POWER.labels(self.node, index).set(gpu.power_w)
        failing: dict[str, int] = {}
        for check in report.checks:
            if check.status is CheckStatus.FAIL:
                failing[check.name] = failing.get(check.name, 0) + 1
        # A check reported only while it fails must go back to 0 once it stops.
        names = {c.name for c in report.checks} | self._exported_checks
        for name in names:
            CHECK_FAILURES.labels(self.node, name).set(failing.get(name, 0))
        self._exported_checks = names


def stale(last: GPUNodeStatus, failed: Report) -> GPUNodeStatus:
    """The heartbeat of a sweep that failed: the last results, as of their own report
    time, with the failure beside them, so the operator keeps the findings it had and
    sees that the checks could not run (an error-only report would read as a clean one)."""
    results = [c for c in last.checks.results if not failed_sweep_result(c)]
    return last.model_copy(
        update={
            "checks": last.checks.model_copy(update={"results": [*results, *failed.checks]}),
            "last_heartbeat": failed.time,
        }
    )


def failed_sweep_result(check: CheckResult) -> bool:
    return check.name == "backend" and check.status is CheckStatus.ERROR


def failed_sweep(report: Report) -> bool:
    """The backend could not be read at all: the report holds only that error."""
    return any(failed_sweep_result(c) for c in report.checks)


def simulated_model(node: dict[str, Any]) -> GpuModel:
    """The model a simulated agent plays: the one the node's product label names,
    else an H100 (devcluster nodes are labelled; a bare node is still served)."""
    return gpu_model(node) or get_model("H100")


class XidWaiter(Protocol):
    def wait_for_xid(self, timeout: float) -> bool: ...


def run_agent(
    core: AgentCore,
    *,
    stop: threading.Event,
    waiter: XidWaiter | None = None,
    node_annotations: Callable[[], dict[str, Any]] | None = None,
) -> None:
    """The real agent's loop: sweep every interval (the policy's, once the operator
    published it), and at once on a critical XID."""
    while not stop.is_set():
        try:
            if node_annotations is not None:
                core.note_remediation(node_annotations())
            core.tick()
        except Exception:
            logger.exception("agent sweep failed; retrying at the next interval")
        core.woken.clear()
        deadline = core.next_sweep()
        while not stop.is_set():
            remaining = (deadline - core.clock()).total_seconds()
            if remaining <= 0 or core.woken.is_set():
                break
            if waiter is not None and waiter.wait_for_xid(min(remaining, 1.0)):
                logger.info("critical XID: sweeping now")
                break
            if waiter is None:
                stop.wait(min(remaining, 1.0))


def main(
    *,
    node: str,
    kubeconfig: str | None,
    interval: datetime.timedelta,
    heartbeat: datetime.timedelta,
    expected_gpus: int | None,
    kernel_log: str,
    metrics_port: int,
    simulated: bool = False,
) -> None:
    """``pitcrew agent``: the agent on a GPU node. ``simulated`` swaps NVML for the
    sim backend (a healthy node of the model its label names): the agent's own
    API traffic, RBAC and admission then run for real on machines without GPUs, and
    its kernel log too, when it has one (a devcluster's real node)."""
    api = api_client(kubeconfig)
    core_api = client.CoreV1Api(api)

    def annotations() -> dict[str, Any]:
        return dict(to_dict(api, core_api.read_node(node))["metadata"].get("annotations") or {})

    node_obj = to_dict(api, core_api.read_node(node))
    uid = node_obj["metadata"].get("uid", "")
    backend: Any
    if simulated:
        backend = SimBackend(
            node=node,
            model=simulated_model(node_obj),
            gpus=gpu_capacity(node_obj),
            kernel_log=KernelLog(Path(kernel_log)) if kernel_log else None,
        )
    else:
        from gpuhealth.backends.nvml import NvmlBackend  # noqa: PLC0415 - needs the driver

        backend = NvmlBackend(kernel_log=Path(kernel_log) if kernel_log else None)
    checker = Checker(backend=backend, node=node, expect=Expectations(gpus=expected_gpus))
    core = AgentCore(
        api=api, node=node, node_uid=uid, checker=checker, heartbeat=heartbeat, interval=interval
    )
    if metrics_port:
        start_http_server(metrics_port)
    stop = threading.Event()

    threading.Thread(
        target=gpunodes.follow, args=(api, node, core.follow), kwargs={"stop": stop}, daemon=True
    ).start()
    run_agent(
        core,
        stop=stop,
        waiter=None if simulated else backend,
        node_annotations=annotations,
    )

"""Run a suite against a backend and produce a :class:`~gpuhealth.report.Report`.

:class:`Checker` is what a long-running agent keeps: one backend, the memory
that rates and latches need, and the thresholds. Sampling runs on a worker
thread with a timeout, because an NVML call on a failing GPU can block for
minutes; a timed-out or failed sample yields a report whose ``backend`` check
is ``error`` (the node could not be checked; not evidence against it).
"""

from __future__ import annotations

import concurrent.futures
import datetime
from collections.abc import Collection, Mapping

from gpuhealth.active.probes import SUITES, Probes, probes_not_run, run_probes
from gpuhealth.backends.base import Backend
from gpuhealth.checks import PASSIVE, CheckContext, Expectations, Memory
from gpuhealth.errors import GpuhealthError
from gpuhealth.history import CounterHistory
from gpuhealth.models import GpuModel, UnknownGpuModelError, require_model_for_nvml_name
from gpuhealth.report import CheckResult, CheckStatus, Report
from gpuhealth.samples import NodeSample
from gpuhealth.thresholds import Thresholds


class UnknownCheckError(GpuhealthError, ValueError):
    """A check name that is not one of :data:`gpuhealth.checks.PASSIVE`."""


class Checker:
    def __init__(
        self,
        *,
        backend: Backend,
        node: str,
        expect: Expectations | None = None,
        thresholds: Mapping[str, float] | None = None,
        disabled: Collection[str] = (),
        sample_timeout: float = 30.0,
    ) -> None:
        self.backend = backend
        self.node = node
        self.sample_timeout = sample_timeout
        self.last_sample: NodeSample | None = None
        self.memory = Memory(counters=CounterHistory(window=datetime.timedelta(0)))
        self.configure(expect=expect, thresholds=thresholds, disabled=disabled)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="gpuhealth-sample"
        )

    def configure(
        self,
        *,
        expect: Expectations | None = None,
        thresholds: Mapping[str, float] | None = None,
        disabled: Collection[str] = (),
    ) -> None:
        """Set what the checks expect and judge by, at once for the next run (a policy
        change reaching a running agent). Counter history, throttle timers and latched
        XIDs are kept: a new threshold judges the same evidence, it does not forget it.
        Unknown names are refused before anything changes."""
        unknown = sorted(set(disabled) - set(PASSIVE))
        if unknown:
            raise UnknownCheckError(
                f"unknown check(s) {', '.join(unknown)}; known: {', '.join(PASSIVE)}"
            )
        values = Thresholds(thresholds)
        self.expect = expect or Expectations()
        self.thresholds = values
        self.disabled = frozenset(disabled)
        self.memory.counters.window = datetime.timedelta(seconds=values["rate.window_s"])
        self.memory.counters.min_span = datetime.timedelta(seconds=values["rate.min_span_s"])

    def _sample(self) -> NodeSample | str:
        future = self._pool.submit(self.backend.sample)
        try:
            return future.result(timeout=self.sample_timeout)
        except concurrent.futures.TimeoutError:
            # The hung call keeps its thread; later samples get a fresh one.
            self._pool.shutdown(wait=False)
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="gpuhealth-sample"
            )
            return f"{self.backend.name}: sampling timed out after {self.sample_timeout:.0f}s"
        except Exception as error:
            return f"{self.backend.name}: {type(error).__name__}: {error}"

    def run(self, *, suite: str = "passive", probes: Probes | None = None) -> Report:
        if suite not in SUITES:
            raise ValueError(f"unknown suite {suite!r}; choose one of {', '.join(SUITES)}")
        sample = self._sample()
        if isinstance(sample, str):
            return Report(
                node=self.node,
                time=datetime.datetime.now(datetime.UTC),
                backend=self.backend.name,
                suite=suite,
                checks=[CheckResult(name="backend", status=CheckStatus.ERROR, message=sample)],
            )
        self.last_sample = sample
        expect = self.expect
        model_problem = ""
        if expect.model is None and sample.gpus:
            model, model_problem = _model_of(sample)
            expect = Expectations(
                gpus=expect.gpus,
                driver_version=expect.driver_version,
                ib_ports=expect.ib_ports,
                mig_enabled=expect.mig_enabled,
                model=model,
            )
        context = CheckContext(
            sample=sample, thresholds=self.thresholds, memory=self.memory, expect=expect
        )
        results: list[CheckResult] = []
        for name, check in PASSIVE.items():
            if name not in self.disabled:
                results.extend(check(context))
        if SUITES[suite]:
            gpus = [g.identity.index for g in sample.gpus if not g.lost]
            if probes is None:
                results.append(
                    CheckResult(
                        name="active",
                        status=CheckStatus.ERROR,
                        message="active probes need a probe backend",
                    )
                )
            elif expect.model is None:
                # No model, no floors: every probe is "could not run", never a pass.
                results.extend(
                    probes_not_run(
                        suite=suite,
                        gpus=gpus,
                        message=model_problem or "the node reports no GPUs to name a model",
                    )
                )
            else:
                results.extend(run_probes(probes, suite=suite, model=expect.model, gpus=gpus))
        return Report(
            node=self.node,
            time=sample.time,
            backend=self.backend.name,
            suite=suite,
            gpus=[g.identity for g in sample.gpus],
            checks=results,
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self.backend.close()


def _model_of(sample: NodeSample) -> tuple[GpuModel | None, str]:
    """The model the node's GPUs name, or ``None`` and why not.

    Lost GPUs answer with no name, so the first GPU that names itself decides;
    a node whose GPUs disagree has no one model to judge probes against.
    """
    names = sorted({g.identity.model.strip() for g in sample.gpus if g.identity.model.strip()})
    if not names:
        return None, "no GPU reported its model name"
    if len(names) > 1:
        return None, f"GPUs report different models: {', '.join(names)}"
    try:
        return require_model_for_nvml_name(names[0]), ""
    except UnknownGpuModelError as error:
        return None, str(error)

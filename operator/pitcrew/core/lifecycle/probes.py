"""Starting a validation: the node out of service under the validating taint, a probe Job.

Apart from the Validating handler (:mod:`~pitcrew.core.lifecycle.validating`)
because repairs and maintenance start validations too, and the handler itself
takes failing nodes out, which is further up the package.
"""

from __future__ import annotations

from pitcrew.api.gpunode import Phase
from pitcrew.api.vocabulary import VALIDATING_TAINT
from pitcrew.core import actions as a
from pitcrew.core.lifecycle.builder import Builder
from pitcrew.core.names import probe_name

PROBE_ATTEMPTS = 3
"""Probes one validation may start (after timeouts or reports that are no verdict)
before the node is taken out as not validatable."""


def start_validation(b: Builder, reason: str, message: str) -> None:
    b.go(Phase.VALIDATING, reason, message)
    b.set(drain=None, remediation=None)
    b.ensure_cordon(VALIDATING_TAINT, reason, reason)
    start_probe(b, attempt=1)


def start_probe(b: Builder, *, attempt: int) -> None:
    # A ValidationRun's own suite wins over the policy's (a run may ask for burn-in).
    suite = b.node.validation_suite or b.policy.spec.validation.suite.value
    name = probe_name(b.node.name, b.now, attempt)
    b.set(probe_job=name, probe_attempts=attempt)
    b.wake(b.now + b.policy.spec.validation.timeout)
    b.actions.append(
        a.StartProbe(
            suite=suite,
            name=name,
            message=f"{suite} validation of {b.node.name} (attempt {attempt}/{PROBE_ATTEMPTS})",
        )
    )

"""Remediators: the rungs of a remediation ladder, behind one small interface.

A remediator *starts* a repair and returns; whether the repair worked is
judged by the lifecycle from the evidence (a fresh healthy report from the
node agent, then validation), never from the remediator's own say-so. Every
remediator that can be is idempotent for one key: the same key twice does the
work once
(Job name, webhook Idempotency-Key, annotation value).
"""

from pitcrew.remediators.base import RemediationError, RemediationRequest, Remediator

__all__ = ["RemediationError", "RemediationRequest", "Remediator"]

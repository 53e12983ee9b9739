"""Deterministic names of the Jobs and keys Pitcrew creates: the same decision taken
twice (a retry, a new leader) names the same object, so creating it twice is a no-op.
"""

from __future__ import annotations

import datetime
import hashlib


def bounded_name(text: str, limit: int = 63) -> str:
    """``text`` as a name of at most ``limit`` characters that stays unique: a long one
    keeps its start and ends in a hash of the whole (truncation alone made the keys of
    two long node names, or two attempts on one, collide)."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return f"{text[: limit - 11].rstrip('-')}-{digest}"


def probe_name(node: str, since: datetime.datetime | None, attempt: int = 1) -> str:
    stamp = int(since.timestamp()) if since else 0
    return bounded_name(f"pitcrew-probe-{node}-{stamp}-{attempt}")


def remediation_key(node: str, step: int, attempt: int, started: datetime.datetime) -> str:
    return bounded_name(f"pitcrew-fix-{node}-{step}-{attempt}-{int(started.timestamp())}")


def verification_name(node: str, started: datetime.datetime) -> str:
    return bounded_name(f"pitcrew-verify-{node}-{int(started.timestamp())}")

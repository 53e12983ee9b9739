"""Lease-based leader election (coordination.k8s.io/v1), from the kubernetes client.

Uses ``kubernetes.leaderelection`` with its LeaseLock: the candidate blocks
until it holds the Lease, then starts the operator; a renewal thread keeps
the Lease. If renewal fails (partitioned from the apiserver, or another
candidate took over), the process exits at once: a leader that cannot prove
it leads must stop acting, and the restart makes it a standby. A standby
takes over after ``lease_seconds`` without renewal; the new leader needs no
hand-over because every decision's progress is in GPUNode status.
"""

from __future__ import annotations

import logging
import os
import threading

from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

logger = logging.getLogger(__name__)
EXIT_LOST_LEASE = 3


def wait_for_leadership(*, name: str, namespace: str, identity: str, lease_seconds: int) -> None:
    """Block until this process holds the Lease; exit the process if it is lost later.

    The client's default configuration must already point at the cluster."""
    leading = threading.Event()

    def started() -> None:
        logger.info("%s is the leader (Lease %s/%s)", identity, namespace, name)
        leading.set()

    def stopped() -> None:
        logger.error("%s lost the Lease %s/%s: exiting", identity, namespace, name)
        os._exit(EXIT_LOST_LEASE)

    renew = max(lease_seconds * 2 // 3, 2)
    retry = max(renew // 3, 1)
    config = electionconfig.Config(
        LeaseLock(name, namespace, identity),
        lease_duration=lease_seconds,
        renew_deadline=renew,
        retry_period=retry,
        onstarted_leading=started,
        onstopped_leading=stopped,
    )
    threading.Thread(
        target=leaderelection.LeaderElection(config).run, daemon=True, name="leader-election"
    ).start()
    logger.info("%s waiting for the Lease %s/%s", identity, namespace, name)
    leading.wait()

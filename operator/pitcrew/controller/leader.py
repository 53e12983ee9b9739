"""Lease-based leader election (coordination.k8s.io/v1), from the kubernetes client.

Uses ``kubernetes.leaderelection`` with its LeaseLock: the candidate blocks
until it holds the Lease, then starts the operator; a renewal thread keeps
the Lease. If renewal fails (partitioned from the apiserver, or another
candidate took over), the process exits at once: a leader that cannot prove
it leads must stop acting, and the restart makes it a standby. A standby
takes over after ``lease_seconds`` without renewal; the new leader needs no
hand-over because every decision's progress is in GPUNode status.

Two ways the client's election can fail silently are closed here. Its lock
catches only ``ApiException``: a connection error while the apiserver
restarts would end the election thread without calling ``onstopped_leading``,
and the old leader would go on acting while a standby takes over. Every Lease
call therefore has a request timeout and turns a transport error into an
``ApiException`` (status 0), which the election retries until its renew
deadline, and the process exits whenever the election thread ends, for
whatever reason.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

logger = logging.getLogger(__name__)
EXIT_LOST_LEASE = 3
EXIT_ELECTION_ENDED = 4


class Tenure:
    """How long this process may still act as the leader, on its own clock.

    The election library gives up the Lease only after its renew deadline has passed
    *and* its last try returned, which on a slow or throttled apiserver can be later
    than the moment a standby may take the Lease (``lease_seconds`` after it saw the
    last renewal). So the leader keeps its own account: it may act until
    ``window`` (the renew deadline) after it *sent* the last renewal that succeeded.
    A standby cannot take over before ``lease_seconds`` after that renewal landed,
    so the two never act at once, with the difference as margin for writes in
    flight."""

    def __init__(self, window: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self.clock = clock
        self.until = -math.inf

    def renewed(self, sent_at: float) -> None:
        self.until = max(self.until, sent_at + self.window)

    def valid(self) -> bool:
        return self.clock() < self.until


RENEWALS = frozenset({"create_namespaced_lease", "replace_namespaced_lease"})


class TimedCalls:
    """The Lease API with a timeout on every call and transport errors as ApiException;
    each renewal that succeeds extends ``tenure`` from when it was sent."""

    def __init__(self, api: Any, *, timeout: float, tenure: Tenure | None = None) -> None:
        self._api = api
        self._timeout = timeout
        self._tenure = tenure

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._api, name)

        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("_request_timeout", self._timeout)
            sent = time.monotonic()
            try:
                answer = method(*args, **kwargs)
            except ApiException:
                raise
            except Exception as error:  # urllib3 and socket errors: the apiserver is away
                raise ApiException(status=0, reason=f"{type(error).__name__}: {error}") from error
            if self._tenure is not None and name in RENEWALS:
                self._tenure.renewed(sent)
            return answer

        return call


def run_until_it_ends(run: Callable[[], Any], *, exit: Callable[[int], Any] = os._exit) -> None:
    """Run the election; when it returns or raises, the process must not go on."""
    try:
        run()
        logger.error("leader election ended: exiting")
    except BaseException:
        logger.exception("leader election failed: exiting")
    exit(EXIT_ELECTION_ENDED)


def wait_for_leadership(*, name: str, namespace: str, identity: str, lease_seconds: int) -> Tenure:
    """Block until this process holds the Lease; exit the process if it is lost later.
    Returns the tenure the executor checks before every write.

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
    tenure = Tenure(renew)
    lock = LeaseLock(name, namespace, identity)
    lock.api_instance = TimedCalls(lock.api_instance, timeout=max(retry, 1), tenure=tenure)  # type: ignore[assignment]
    config = electionconfig.Config(
        lock,
        lease_duration=lease_seconds,
        renew_deadline=renew,
        retry_period=retry,
        onstarted_leading=started,
        onstopped_leading=stopped,
    )
    election = leaderelection.LeaderElection(config)
    threading.Thread(
        target=run_until_it_ends, args=(election.run,), daemon=True, name="leader-election"
    ).start()
    logger.info("%s waiting for the Lease %s/%s", identity, namespace, name)
    leading.wait()
    return tenure

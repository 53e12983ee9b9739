"""Restart in place when Pitcrew asks: the training side of ``pitcrew.dev/restart-requested``.

When Pitcrew takes a node from under a training job, the job's other ranks do not
fail: they wait in their next collective, and a process stuck in NCCL never returns
to the training loop. Where the pod declares, on a container, a restart rule with
action ``RestartAllContainers`` on an exit code::

    restartPolicy: Never            # or OnFailure; a container with rules must set one
    restartPolicyRules:
    - action: RestartAllContainers
      exitCodes: {operator: In, values: [85]}

the operator writes ``pitcrew.dev/restart-requested`` on those pods
(:mod:`pitcrew.core.in_place`), and :class:`RestartWatcher`, a daemon thread of the
training process, reads its own pod every :data:`POLL_EVERY` seconds and, on a
request newer than the process, ends the process at once (``os._exit``) with the
rule's exit code: the kubelet restarts all the pod's containers in the same pod
(same node, IP and volumes, no scheduling), and training resumes from its last
checkpoint beside the lost rank's replacement. The thread needs no cooperation from
the training loop, which may be stuck in a collective (the NCCL calls release the
interpreter's lock while they wait).

The exit code is ``PITCREW_RESTART_EXIT_CODE`` where set, else the first value of
the pod's first ``RestartAllContainers`` rule with operator ``In``. A pod that
declares no such rule is never polled after the first read: the watcher stops. The
watcher reads its pod with an empty patch, whose answer is the pod: the training job's
Role grants ``patch`` on pods, which the admission policy confines to the pod's own
token and own pod, and no ``get``, which RBAC could not narrow to one pod
(:mod:`pitcrew.deploy.rbac`); an empty patch changes nothing, so the apiserver writes
nothing. It finds its pod as the progress reporter does (``POD_NAME``/``POD_NAMESPACE``
or the hostname).

A request counts only if it is newer than the process: the operator's value is the
start of the drain that took the node, so the process the kubelet starts again after
the exit sees the same request as old and trains on (clocks of the operator's node
and the training node are compared; NTP keeps them within far less than the time a
restart takes). A tenant who writes the annotation on their own pod restarts their
own pod, which they may do anyway.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import threading
from collections.abc import Callable
from typing import Any, NoReturn

from pitcrew.core.in_place import requested_at, restart_exit_code

logger = logging.getLogger(__name__)
POLL_EVERY = 10.0
"""Seconds between two reads of the pod: the request waits this long at most, beside
the restart's minutes (one ``get`` of one pod per pod and interval on the apiserver)."""
READ_TIMEOUT = 10.0
EXIT_CODE_ENV = "PITCREW_RESTART_EXIT_CODE"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _exit(code: int) -> NoReturn:
    os._exit(code)


class RestartWatcher:
    """Polls its own pod from a daemon thread and exits the process with the restart
    rule's code when Pitcrew asks for a restart in place."""

    def __init__(
        self,
        *,
        pod: str,
        namespace: str,
        core: Callable[[], Any],
        interval: float = POLL_EVERY,
        clock: Callable[[], datetime.datetime] = _now,
        exit: Callable[[int], None] = _exit,
    ) -> None:
        self.pod, self.namespace, self.core = pod, namespace, core
        """``core``: the ``CoreV1Api`` to read the pod with (made on first use)."""
        self.interval = interval
        self.started = clock()
        """When this process started watching: an older request is not for it."""
        self.exit = exit
        env = os.environ.get(EXIT_CODE_ENV, "").strip()
        self.code: int | None = int(env) if env else None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pitcrew-restart", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def check(self) -> bool:
        """Read the pod once; exit on a request newer than the process. False when this
        pod declares no restart rule (and no exit code is set): nothing to watch for."""
        response = self.core().patch_namespaced_pod(
            self.pod, self.namespace, {}, _request_timeout=READ_TIMEOUT, _preload_content=False
        )
        pod = json.loads(response.data)
        if self.code is None:
            self.code = restart_exit_code(pod.get("spec") or {})
            if self.code is None:
                logger.info(
                    "pod %s declares no RestartAllContainers rule: Pitcrew's requests to "
                    "restart in place are not watched for",
                    self.pod,
                )
                return False
        requested = requested_at((pod.get("metadata") or {}).get("annotations") or {})
        if requested is not None and requested > self.started:
            logger.warning(
                "Pitcrew asked pod %s to restart in place (its job lost a node at %s): "
                "exiting with code %d",
                self.pod,
                requested.isoformat(),
                self.code,
            )
            self.exit(self.code)
            return False
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self.check():
                    return
            except Exception:  # the apiserver away: the next poll tries again
                logger.warning("could not read pod %s", self.pod, exc_info=True)
            self._stop.wait(self.interval)

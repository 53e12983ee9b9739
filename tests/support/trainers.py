"""A tenant's training process, started as its pod would start it: with the pod's own
credentials (its ServiceAccount's token bound to the pod) and environment, running
Pitcrew's framework hooks (:mod:`support.hooked_training`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from kubernetes import client

from pitcrew.deploy import install
from pitcrew.dev.devcluster import install as install_dev

SUPPORT = Path(__file__).resolve().parent
"""This folder: the training script, and the modules its processes import."""


@dataclass
class Trainer:
    """The tenant's training process, and what it writes on stderr."""

    process: subprocess.Popen[bytes]
    log: IO[bytes]

    def running(self) -> bool:
        return self.process.poll() is None

    def said(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-2000:]

    def stop(self) -> None:
        """Kill the process and every rank it spawned (a rank may be frozen)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.log.close()


def pod_credentials(api: client.ApiClient, namespace: str, pod: str, folder: Path) -> str:
    """A kubeconfig with what the training pod itself holds: its ServiceAccount's token,
    bound to the pod (the projected token), in a namespace opted in for training jobs."""
    install.install_training_jobs(api, namespace)
    found = client.CoreV1Api(api).read_namespaced_pod(pod, namespace)
    path = install_dev.service_account_kubeconfig(
        api, component="trainer", namespace=namespace, path=folder / f"{pod}.kubeconfig",
        account=found.spec.service_account_name,
        bound_pod={"metadata": {"name": pod, "uid": found.metadata.uid}},
    )  # fmt: skip
    return str(path)


def train(
    kubeconfig: str, namespace: str, pod: str, node: str, *args: str, **ranks: str
) -> Trainer:
    """Start a training process with the environment its pod would give it (and, for a
    process of several pods' ranks, ``ranks``: ``RANK_PODS`` and the like)."""
    env = {
        **os.environ,
        **ranks,
        "KUBECONFIG": kubeconfig,
        "POD_NAME": pod,
        "POD_NAMESPACE": namespace,
        "NODE_NAME": node,
        "PYTHONPATH": os.pathsep.join([str(SUPPORT), os.environ.get("PYTHONPATH", "")]),
    }
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by Trainer.stop
    process = subprocess.Popen(
        [sys.executable, str(SUPPORT / "hooked_training.py"), *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
        start_new_session=True,  # its ranks in its own process group, killed with it
    )
    return Trainer(process, log)

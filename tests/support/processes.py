"""Pitcrew processes (operators, simulated agents) started by the end-to-end tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from fleet import NAMESPACE

from pitcrew.sim.devcluster.cluster import free_port


class Processes:
    def __init__(self, directory: Path, admin_kubeconfig: str, operator_kubeconfig: Path) -> None:
        self.directory = directory
        self.admin_kubeconfig = admin_kubeconfig
        self.operator_kubeconfig = operator_kubeconfig
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.metrics_ports: dict[str, int] = {}
        """Metrics port of each process that serves one, stable across restarts."""

    def metrics_port(self, name: str) -> int:
        return self.metrics_ports.setdefault(name, free_port())

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = (self.directory / f"{name}.log").open("ab")
        process = subprocess.Popen(
            [sys.executable, "-m", "pitcrew.cli", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.running[name] = process
        return process

    def start_operator(self, identity: str, *, resync: str = "2") -> subprocess.Popen[bytes]:
        return self.start(
            identity,
            "operator",
            "--kubeconfig",
            str(self.operator_kubeconfig),
            "--namespace",
            NAMESPACE,
            "--identity",
            identity,
            "--lease-seconds",
            "4",
            "--resync-seconds",
            resync,
            "--metrics-port",
            str(self.metrics_port(identity)),
            "--health-port",
            "0",
        )

    def kill(self, name: str) -> None:
        process = self.running.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)

    def stop_all(self) -> None:
        for name in list(self.running):
            process = self.running.pop(name)
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()

    def log(self, name: str) -> str:
        return (self.directory / f"{name}.log").read_text(errors="replace")

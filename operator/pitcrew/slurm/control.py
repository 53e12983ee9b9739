"""Slurm's command-line tools, run as subprocesses.

Pitcrew speaks to Slurm only through ``scontrol`` and ``squeue``: they carry
Slurm's own authentication (munge, or ``auth/slurm``) and its wire protocol,
which changes between releases and which Pitcrew must not reimplement. Their
configuration comes from the process environment (``SLURM_CONF``), as for any
user of them.

Every argument is one argv element, never a shell string, and node names are
plain names (:data:`pitcrew.core.slurm.NODE_NAME`): no node, label or reason
text can add a word to a command. A tool that cannot reach slurmctld (it is
restarting, the network is partitioned) fails transiently and is tried again on
the next poll or decision; an answer such as "Invalid node name" is permanent.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pitcrew.api.errors import PitcrewError
from pitcrew.core.slurm import NODE_NAME, Read, parse_jobs, parse_nodes
from pitcrew.core.views import SlurmNodeView

PERMANENT = ("invalid node name", "invalid node state", "access/permission denied")
"""Answers that retrying will not change (lower case, as a part of stderr)."""
STATES = frozenset({"DRAIN", "RESUME", "DOWN"})


class SlurmError(PitcrewError):
    """A Slurm tool failed or timed out; the message is its own answer. ``transient``:
    whether the same call may succeed later (a busy controller), not a refusal."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass
class Slurm:
    """``scontrol``, ``squeue`` and ``sinfo`` at these paths, with ``env`` added to the
    environment (``SLURM_CONF``), each call bounded by ``timeout`` seconds."""

    scontrol: str = "scontrol"
    squeue: str = "squeue"
    sinfo: str = "sinfo"
    env: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 30.0
    scontrol_json: bool = True
    """``scontrol --json`` exists (Slurm 23.02 and later); before, ``sinfo --json``
    prints the same list of nodes. Learnt from the first answer."""

    @classmethod
    def beside(cls, scontrol: str, **kwargs: Any) -> Slurm:
        """The tools in the folder of ``scontrol`` (one Slurm installation)."""
        path = Path(scontrol)
        return cls(
            scontrol=scontrol,
            squeue=str(path.with_name("squeue")),
            sinfo=str(path.with_name("sinfo")),
            **kwargs,
        )

    def nodes(self) -> Read[dict[str, SlurmNodeView]]:
        """Every Slurm node: name, state and flags, reason."""
        if self.scontrol_json:
            try:
                return parse_nodes(self._run([self.scontrol, "--json", "show", "node"]))
            except SlurmError as error:
                if "unrecognized option" not in str(error) and "invalid option" not in str(error):
                    raise
                self.scontrol_json = False
        return parse_nodes(self._run([self.sinfo, "--json"]))

    def jobs(self, node: str) -> Read[tuple[tuple[str, str], ...]]:
        """The jobs running (or ending) on ``node``: id and comment."""
        _plain(node)
        argv = [self.squeue, "-h", "-w", node, "-t", "RUNNING,COMPLETING", "-o", "%i|%k"]
        return parse_jobs(self._run(argv))

    def update(self, node: str, state: str, reason: str = "") -> None:
        """``scontrol update NodeName=<node> State=<state> [Reason=<reason>]``."""
        _plain(node)
        if state not in STATES:
            raise SlurmError(f"state {state!r} is not one Pitcrew sets", transient=False)
        argv = [self.scontrol, "update", f"NodeName={node}", f"State={state}"]
        if reason:
            # One argv element: spaces and colons stay inside Reason.
            argv.append(f"Reason={reason}")
        self._run(argv)

    def comment(self, job: str, text: str) -> None:
        """``scontrol update JobId=<job> Comment=<text>``: a job's owner may set it, so
        a Slurm job reports its progress there (:mod:`pitcrew.client.progress`)."""
        if not re.fullmatch(r"\d+(_\d+)?", job):
            raise SlurmError(f"{job!r} is not a Slurm job id", transient=False)
        self._run([self.scontrol, "update", f"JobId={job}", f"Comment={text}"])

    def _run(self, argv: list[str]) -> str:
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                env={**os.environ, **self.env},
                check=False,
            )
        except FileNotFoundError:
            raise SlurmError(
                f"{argv[0]} not found: is Slurm's client installed?", transient=False
            ) from None
        except subprocess.TimeoutExpired:
            raise SlurmError(
                f"{argv[1]} timed out after {self.timeout:.0f}s", transient=True
            ) from None
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip()[:500]
            permanent = any(p in said.lower() for p in PERMANENT)
            raise SlurmError(
                f"{' '.join(argv[:3])} failed ({done.returncode}): {said}", transient=not permanent
            )
        return done.stdout


def _plain(node: str) -> None:
    if not NODE_NAME.match(node):
        raise SlurmError(f"{node!r} is not one plain Slurm node name", transient=False)

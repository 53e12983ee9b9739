"""A real Slurm cluster (Debian's slurmctld, slurmd and munged) in one directory, for the tests.

Nothing here is mocked: munged signs the credentials, slurmctld schedules, and
one slurmd per node runs the batch jobs through slurmstepd. Everything the
daemons write (munge key and socket, slurm.conf, state, spool, logs, pid files)
lives in the given directory, so a test cluster never touches /etc/slurm,
/etc/munge or a Slurm that is already installed on the machine.

Several nodes on one host: one slurmd per node, each started as
``slurmd -D -N <node>`` and listening on its node's own ``Port``, with its own
spool, log and pid file through ``%n``. Debian's 22.05 appears to be built with
--enable-multiple-slurmd (its cgroup/v2 plugin names the per-node
``<node>_slurmstepd.scope``, and two nodes sharing ``NodeHostname=localhost``
are accepted), but this does not rely on it: each node gets its own
``NodeHostname`` (its name; nothing resolves it, slurmctld only dials
``NodeAddr=127.0.0.1``). So every node is a distinct Slurm node with its own
slurmd, and ``sbatch -w <node>`` runs the job under that node's slurmd
(``$SLURMD_NODENAME`` in the job is the node's name). No network namespaces
and no root are needed for that.

Root is not required either: the daemons run as the current user
(``SlurmUser`` and ``SlurmdUser`` are that user), and without root slurmd can
only run jobs of that user, which is all the tests submit. No cgroups are used
(``proctrack/linuxproc``, ``task/none``) and there is no accounting database.
Each node declares one CPU (``SlurmdParameters=config_overrides``: the host may
have more), so one job makes it ALLOCATED.

Slurm 22.05 caveats that the tests and the parsers must live with: ``scontrol``
has no ``--json`` (later releases have it; ``sinfo --json`` gives the nodes in the
same OpenAPI v0.0.38 shape), and ``squeue --json`` and ``sinfo --json`` ignore
``-w``/``-n``: they list every job and every node. ``State=RESUME`` leaves a
node IDLE+NOT_RESPONDING until slurmctld's next ping, about a second; and with
``ReturnToService=2`` a node set DOWN by hand returns to IDLE at its next
registration, about 100 s later.

A newer Slurm runs from a root file system of its own (``root``: Debian trixie's
Slurm 24.11 and munge, unpacked by ``make slurm-trixie`` with mmdebstrap into
``~/.cache/pitcrew/slurm-trixie``): each daemon and client runs in a mount namespace
of its own (``unshare --mount``) in which /proc, /sys, /dev and the cluster's
directory are bound into that root at the same paths, then ``chroot``. Paths in
slurm.conf are therefore the same inside and out, and the operator under test is
given wrapper scripts (:attr:`SlurmCluster.tools`: ``scontrol``, ``squeue``,
``sinfo``) that run the root's clients the same way. Slurm 23.11 dropped the
``switch/none`` plugin, so slurm.conf leaves ``SwitchType`` unset (its default
in 22.05 too).

slurmstepd leaves its slurmd's session and outlives it, so :meth:`stop` does not
rely on process groups: it cancels the jobs, stops the daemons, and then kills
every process left whose environment carries this cluster's marker (the
daemons, their slurmstepds, jobs submitted through :attr:`env`) and every
process in their sessions: a job's script runs in its slurmstepd's session, so
a job submitted with ``--export=NONE`` goes too. A process that was only given
this cluster's ``SLURM_CONF`` (an operator under test) is left alone.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from pitcrew.dev.devcluster.cluster import free_port

MARKER = "PITCREW_SLURM_CLUSTER"
"""Environment variable naming the cluster's directory in its daemons and jobs."""

STARTUP_TIMEOUT = 60.0
# Debian installs the daemons in /usr/sbin, which is not on a normal user's PATH.
SBIN = ("/usr/sbin", "/sbin", "/usr/local/sbin")
TRIXIE_ROOT = Path(
    os.environ.get("PITCREW_SLURM_TRIXIE", Path.home() / ".cache" / "pitcrew" / "slurm-trixie")
)
"""Debian trixie with its Slurm (24.11) and munge, made by ``make slurm-trixie``."""
HANG_EPILOG = "hang-epilog"
"""While a file of this name is in a cluster's folder, an ``Epilog`` that waits for it
to go (tests/e2e/slurm/conftest.py) keeps each ending job COMPLETING on its node, as
processes that cannot be killed would."""
IN_ROOT = """
root=$1 dir=$2; shift 2
for d in /proc /sys /dev "$dir"; do
    mkdir -p "$root$d" && mount --rbind "$d" "$root$d" || exit 97
done
exec chroot "$root" "$@"
"""
"""Run a command in ``root`` with /proc, /sys, /dev and ``dir`` bound in (in a mount
namespace of its own, so nothing is left mounted when it ends)."""


def binary(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=os.pathsep.join(SBIN))
    if found is None:
        raise RuntimeError(
            f"{name} not found: install the Debian packages `slurmctld slurmd slurm-client "
            "munge` (make slurm does this; .ci/run runs it)"
        )
    return found


NEEDED = ("munged", "slurmctld", "slurmd", "scontrol", "sbatch", "squeue", "scancel")


def missing_binaries(root: Path | None = None) -> list[str]:
    """The daemons and clients the cluster needs that this machine (or ``root``) lacks."""
    if root is not None:
        return [name for name in NEEDED if in_root(root, name) is None]
    return [name for name in NEEDED if binary_or_none(name) is None]


def in_root(root: Path, name: str) -> str | None:
    """The path of ``name`` inside ``root`` (as the chroot sees it), if it is there."""
    for folder in ("/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        if (root / folder.lstrip("/") / name).exists():
            return f"{folder}/{name}"
    return None


def binary_or_none(name: str) -> str | None:
    try:
        return binary(name)
    except RuntimeError:
        return None


def write_munge_key(path: Path) -> None:
    """1024 random bytes, readable by the owner only (munged refuses anything looser)."""
    path.write_bytes(secrets.token_bytes(1024))
    path.chmod(0o400)


def slurm_conf(directory: Path, nodes: list[str], *, ctld_port: int, ports: list[int]) -> str:
    user = getpass.getuser()
    lines = [
        "ClusterName=pitcrew",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={ports[0]}",
        f"SlurmUser={user}",
        f"SlurmdUser={user}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        # Read by both auth/munge and cred/munge in 22.05.
        f"AuthInfo=socket={directory / 'munge.socket'}",
        f"StateSaveLocation={directory / 'state'}",
        f"SlurmdSpoolDir={directory / 'spool' / '%n'}",
        f"SlurmctldPidFile={directory / 'slurmctld.pid'}",
        f"SlurmdPidFile={directory / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={directory / 'slurmctld.log'}",
        f"SlurmdLogFile={directory / 'slurmd-%n.log'}",
        f"PlugStackConfig={directory / 'plugstack.conf'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "MpiDefault=none",
        "ReturnToService=2",
        # Each node declares one CPU of a host that has more: take slurm.conf's word.
        "SlurmdParameters=config_overrides",
        "MailProg=/bin/true",
    ]
    lines += [
        f"NodeName={name} NodeHostname={name} NodeAddr=127.0.0.1 Port={port} CPUs=1 State=UNKNOWN"
        for name, port in zip(nodes, ports, strict=True)
    ]
    lines.append(
        f"PartitionName=main Nodes={','.join(nodes)} Default=YES MaxTime=INFINITE State=UP"
    )
    return "\n".join(lines) + "\n"


def node_states(output: str) -> dict[str, str]:
    """NodeName -> State from ``scontrol -o show node`` (one node a line)."""
    states = {}
    for line in output.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "NodeName" in fields:
            states[fields["NodeName"]] = fields.get("State", "")
    return states


def processes() -> dict[int, bytes]:
    """pid -> environment (NUL-separated) of every process this user may read, but this one."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):  # gone, or not ours to read
                found[int(entry.name)] = (entry / "environ").read_bytes()
    return found


def session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def leftovers(marker: bytes) -> set[int]:
    """The processes carrying ``marker`` (``NAME=value``) in their environment, and their sessions.

    slurmstepd starts a session of its own for each job and runs the job's
    script in it: a job submitted with ``--export=NONE`` is found through it.
    """
    everything = processes()
    marked = {pid for pid, env in everything.items() if marker in env.split(b"\0")}
    sessions = {session(pid) for pid in marked} - {None, os.getsid(0)}
    return marked | {pid for pid in everything if session(pid) in sessions}


def name(process: subprocess.Popen[bytes]) -> str:
    argv = process.args
    assert isinstance(argv, list)
    return Path(str(argv[0])).name


def terminate(process: subprocess.Popen[bytes], timeout: float = 10) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class SlurmCluster:
    """``with SlurmCluster(tmp_path, ["gpu-node-0", "gpu-node-1"]) as slurm: ...``"""

    def __init__(
        self,
        directory: Path,
        nodes: list[str],
        extra: Sequence[str] = (),
        *,
        root: Path | None = None,
    ) -> None:
        """``extra``: more slurm.conf lines (``Prolog=...``, ``HealthCheckProgram=...``);
        ``root``: a root file system whose Slurm and munge to run (see the module)."""
        if not nodes:
            raise ValueError("a Slurm cluster needs at least one node")
        self.root = root.resolve() if root is not None else None
        self.directory = directory.resolve()
        if any(c.isspace() for c in str(self.directory)):
            raise ValueError(f"slurm.conf cannot hold a path with spaces: {self.directory}")
        self.nodes = list(nodes)
        self.extra = list(extra)
        self.conf = self.directory / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf), MARKER: str(self.directory)}
        self.munged: subprocess.Popen[bytes] | None = None
        self.slurmctld: subprocess.Popen[bytes] | None = None
        self.slurmds: dict[str, subprocess.Popen[bytes]] = {}
        self.startup_seconds: float | None = None
        self.tools = self.directory / "bin" if self.root is not None else None
        """With ``root``: a folder of ``scontrol``, ``squeue`` and ``sinfo`` wrappers
        that run the root's clients, for a process outside it (the operator)."""

    def argv(self, *argv: str) -> list[str]:
        """``argv`` with its program resolved (the installed one, or the root's, run in
        the root)."""
        if self.root is None:
            return [binary(argv[0]), *argv[1:]]
        program = in_root(self.root, argv[0])
        if program is None:
            raise RuntimeError(f"{argv[0]} not found in {self.root}: run `make slurm-trixie`")
        return [
            "unshare",
            "--mount",
            "sh",
            "-c",
            IN_ROOT,
            "sh",
            str(self.root),
            str(self.directory),
            program,
            *argv[1:],
        ]

    def _write_tools(self) -> None:
        if self.tools is None:
            return
        self.tools.mkdir(exist_ok=True)
        for tool in ("scontrol", "squeue", "sinfo"):
            script = self.tools / tool
            quoted = " ".join(shlex.quote(a) for a in self.argv(tool))
            script.write_text(f'#!/bin/sh\nexec {quoted} "$@"\n')
            script.chmod(0o755)

    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        started = time.monotonic()
        try:
            self._start_munged()
            self._write_conf()
            self._write_tools()
            self.start_controller()
            for node in self.nodes:
                (self.directory / "spool" / node).mkdir(parents=True, exist_ok=True)
                argv = self.argv("slurmd", "-D", "-N", node, "-f", str(self.conf))
                self.slurmds[node] = self._spawn(f"slurmd-{node}", argv)
            self._wait_idle()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started

    def start_controller(self) -> None:
        """Start slurmctld (again, after :meth:`stop_controller`: it recovers its state
        from ``StateSaveLocation``, as after a restart in production)."""
        self.slurmctld = self._spawn(
            "slurmctld", self.argv("slurmctld", "-D", "-f", str(self.conf))
        )

    def stop_controller(self) -> None:
        """Stop slurmctld (SIGTERM: it saves its state); slurmd and the jobs run on."""
        if self.slurmctld is not None:
            terminate(self.slurmctld)

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        # The daemons log to their own files; this catches what they print before.
        with (self.directory / f"{name}.out").open("ab") as out:
            return subprocess.Popen(
                argv,
                env=self.env,
                cwd=self.directory,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _start_munged(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        key = self.directory / "munge.key"
        write_munge_key(key)
        socket = self.directory / "munge.socket"
        self.munged = self._spawn(
            "munged",
            self.argv(
                "munged",
                "--foreground",
                # A test directory under /tmp may fail munged's strict permission
                # checks of every parent directory; --force makes those warnings.
                "--force",
                f"--socket={socket}",
                f"--key-file={key}",
                f"--pid-file={self.directory / 'munged.pid'}",
                f"--log-file={self.directory / 'munged.log'}",
                f"--seed-file={self.directory / 'munged.seed'}",
            ),
        )
        self._wait_for(socket.exists, "munged did not create its socket", self.munged)

    def _write_conf(self) -> None:
        (self.directory / "state").mkdir(exist_ok=True)
        (self.directory / "plugstack.conf").write_text("")
        ports = [free_port() for _ in self.nodes]
        conf = slurm_conf(self.directory, self.nodes, ctld_port=free_port(), ports=ports)
        self.conf.write_text(conf + "".join(f"{line}\n" for line in self.extra))

    def _wait_idle(self) -> None:
        def all_idle() -> bool:
            answer = subprocess.run(
                self.argv("scontrol", "-o", "show", "node"),
                env=self.env,
                capture_output=True,
                text=True,
                check=False,
            )
            states = node_states(answer.stdout)
            return all(states.get(node) == "IDLE" for node in self.nodes)

        self._wait_for(all_idle, "the nodes did not all become IDLE", *self._daemons())

    def _wait_for(
        self, condition: Callable[[], bool], what: str, *processes: subprocess.Popen[bytes]
    ) -> None:
        """Poll ``condition``; fail at once if one of ``processes`` exits meanwhile."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not condition():
            dead = [process for process in processes if process.poll() is not None]
            if dead or time.monotonic() > deadline:
                why = ", ".join(f"{name(p)} exited with {p.returncode}" for p in dead)
                raise RuntimeError(
                    f"{what} ({why or 'timed out'}); see the logs in {self.directory}"
                )
            time.sleep(0.2)

    def _daemons(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in (self.slurmctld, *self.slurmds.values(), self.munged) if p is not None]

    def run(self, *argv: str) -> str:
        """Run a Slurm client (``scontrol``, ``sbatch``...) against this cluster; its stdout."""
        answer = subprocess.run(
            self.argv(*argv),
            env=self.env,
            cwd=self.directory,
            capture_output=True,
            text=True,
            check=False,
        )
        if answer.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} failed ({answer.returncode}): {answer.stderr.strip()}"
            )
        return answer.stdout

    def stop(self) -> None:
        """Cancel the jobs, stop every daemon, kill whatever they left; safe to call twice."""
        if self.slurmctld is not None and self.slurmctld.poll() is None:
            self._cancel_jobs()
        for process in (*self.slurmds.values(), self.slurmctld):
            if process is not None:
                terminate(process)
        self._kill_leftovers()
        if self.munged is not None:
            terminate(self.munged)

    def _cancel_jobs(self) -> None:
        try:
            jobs = self.run("squeue", "-h", "-o", "%A").split()
            if jobs:
                self.run("scancel", *jobs)
            deadline = time.monotonic() + 30
            while self.run("squeue", "-h", "-o", "%A").strip() and time.monotonic() < deadline:
                time.sleep(0.2)
        except RuntimeError:
            pass  # the leftovers are killed below all the same

    def _kill_leftovers(self) -> None:
        """What the daemons leave: slurmstepds and jobs, each in a session of its own."""
        marker = f"{MARKER}={self.directory}".encode()
        munged = {self.munged.pid} if self.munged is not None else set()
        for _ in range(50):
            pids = leftovers(marker) - munged
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)

"""Build the devcluster binaries from Go modules, once per source version.

The control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler) is one multi-call binary from ``devcluster/``; kwok is a second
binary from ``devcluster/kwok/``, a separate module so that its client-go
version never has to agree with the control plane's. helm, which the chart
tests need, comes from ``devcluster/helm/`` the same way, cached on its own so
that a helm upgrade never rebuilds the control plane.

Binaries are cached outside the repository, keyed by a hash of the Go sources
and module files: a cold build takes many minutes on two cores, a warm start
must take none. The build streams ``go build -v`` and prints a line every few
dozen packages, so a first run shows it is alive.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pitcrew.dev.devcluster.errors import DevclusterError

SOURCE_FILES = (
    "go.mod",
    "go.sum",
    "cmd/devcluster/main.go",
    "kwok/go.mod",
    "kwok/go.sum",
)
PROGRESS_EVERY = 50


@dataclass(frozen=True)
class Binaries:
    """Where the two built executables are."""

    devcluster: Path
    kwok: Path


def source_dir() -> Path:
    """The ``devcluster/`` Go module: ``$PITCREW_DEVCLUSTER_SRC`` or the checkout
    this package was installed from."""
    override = os.environ.get("PITCREW_DEVCLUSTER_SRC")
    candidate = Path(override) if override else Path(__file__).resolve().parents[4] / "devcluster"
    if not (candidate / "go.mod").is_file():
        raise DevclusterError(
            f"devcluster Go sources not found at {candidate}; run from a Pitcrew checkout "
            "or set PITCREW_DEVCLUSTER_SRC to its devcluster/ folder"
        )
    return candidate


def cache_root() -> Path:
    base = os.environ.get("PITCREW_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME")
    root = Path(base) if base else Path.home() / ".cache"
    return root / "pitcrew" / "devcluster"


def source_key(src: Path, files: tuple[str, ...] = SOURCE_FILES) -> str:
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode())
        digest.update((src / name).read_bytes())
    return digest.hexdigest()[:16]


def kubernetes_version(src: Path) -> str:
    """The ``k8s.io/kubernetes`` version pinned in go.mod, stamped into the
    binaries so that ``/version`` and feature gates see a real release."""
    match = re.search(
        r"^\s*k8s\.io/kubernetes (v\d+\.\d+\.\d+)\s*$", (src / "go.mod").read_text(), re.MULTILINE
    )
    if not match:
        raise DevclusterError(f"{src / 'go.mod'} does not require k8s.io/kubernetes")
    return match.group(1)


def _go() -> str:
    go = shutil.which("go")
    if not go:
        raise DevclusterError("the Go toolchain is needed to build devcluster; install Go >= 1.26")
    return go


def _run_go(args: list[str], *, cwd: Path, what: str, log: Callable[[str], None]) -> None:
    """Run one go command, printing progress from ``-v`` package lines."""
    started = time.monotonic()
    process = subprocess.Popen(
        [_go(), *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    tail: list[str] = []
    for packages, line in enumerate(process.stdout, start=1):
        tail = [*tail[-40:], line.rstrip()]
        if packages % PROGRESS_EVERY == 0:
            log(f"  {what}: {packages} packages, {time.monotonic() - started:.0f}s")
    if process.wait() != 0:
        raise DevclusterError(f"building {what} failed:\n" + "\n".join(tail))
    log(f"  {what}: done in {time.monotonic() - started:.0f}s")


def ensure_built(*, log: Callable[[str], None] = print) -> Binaries:
    """Return the cached binaries, building them first when the sources changed."""
    src = source_dir()
    out = cache_root() / source_key(src)
    binaries = Binaries(devcluster=out / "devcluster", kwok=out / "kwok")
    if binaries.devcluster.is_file() and binaries.kwok.is_file():
        return binaries
    out.mkdir(parents=True, exist_ok=True)
    version = kubernetes_version(src)
    minor = version.split(".")[1]
    ldflags = " ".join(
        [
            "-s",
            "-w",
            f"-X k8s.io/component-base/version.gitVersion={version}",
            "-X k8s.io/component-base/version.gitMajor=1",
            f"-X k8s.io/component-base/version.gitMinor={minor}",
            "-X k8s.io/component-base/version.gitTreeState=clean",
        ]
    )
    log(f"Building devcluster (Kubernetes {version}, etcd, kwok) from Go modules into {out}.")
    log(
        "A cold build compiles ~3,000 packages and takes a long time on a small machine;"
        " later runs reuse it."
    )
    _run_go(["mod", "download"], cwd=src, what="download control-plane modules", log=log)
    _run_go(
        [
            "build",
            "-v",
            "-ldflags",
            ldflags,
            "-o",
            f"{binaries.devcluster}.tmp",
            "./cmd/devcluster",
        ],
        cwd=src,
        what="control plane",
        log=log,
    )
    _run_go(["mod", "download"], cwd=src / "kwok", what="download kwok modules", log=log)
    _run_go(
        [
            "build",
            "-v",
            "-ldflags",
            "-s -w",
            "-o",
            f"{binaries.kwok}.tmp",
            "sigs.k8s.io/kwok/cmd/kwok",
        ],
        cwd=src / "kwok",
        what="kwok",
        log=log,
    )
    # Rename only after both builds succeeded, so a half-built cache never looks complete.
    Path(f"{binaries.devcluster}.tmp").rename(binaries.devcluster)
    Path(f"{binaries.kwok}.tmp").rename(binaries.kwok)
    sys.stdout.flush()
    return binaries


def ensure_helm(*, log: Callable[[str], None] = print) -> Path:
    """Return the cached helm binary, building it from its Go module when needed."""
    src = source_dir()
    match = re.search(r"^\s*helm\.sh/helm/v3 (v[0-9.]+)", (src / "helm/go.mod").read_text(), re.M)
    stamp = f" -X helm.sh/helm/v3/internal/version.version={match.group(1)}" if match else ""
    return _ensure_tool("helm", "helm.sh/helm/v3/cmd/helm", ldflags=f"-s -w{stamp}", log=log)


def ensure_toxiproxy(*, log: Callable[[str], None] = print) -> Path:
    """Return the cached toxiproxy server (the chaos suite's TCP proxy between an
    operator and the apiserver), building it from its Go module when needed."""
    return _ensure_tool("toxiproxy", "github.com/Shopify/toxiproxy/v2/cmd/server", log=log)


def _ensure_tool(
    name: str, package: str, *, ldflags: str = "-s -w", log: Callable[[str], None]
) -> Path:
    """A tool built from its own module ``devcluster/<name>/``, cached on its own so
    that upgrading it never rebuilds the control plane."""
    src = source_dir()
    files = (f"{name}/go.mod", f"{name}/go.sum")
    binary = cache_root() / f"{name}-{source_key(src, files)}" / name
    if binary.is_file():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    log(f"Building {name} from its Go module into {binary.parent} (once).")
    _run_go(["mod", "download"], cwd=src / name, what=f"download {name} modules", log=log)
    _run_go(
        ["build", "-v", "-ldflags", ldflags, "-o", f"{binary}.tmp", package],
        cwd=src / name,
        what=name,
        log=log,
    )
    Path(f"{binary}.tmp").rename(binary)
    return binary

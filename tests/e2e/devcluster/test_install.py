"""`pitcrew install` on a real apiserver, and the README's walkthrough from
`pitcrew devcluster up --with-pitcrew` to a quarantined node, line by line."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

from kubernetes import client

from pitcrew.api import crdgen
from pitcrew.deploy import install
from support.fleet import NAMESPACE, eventually

ROOT = Path(__file__).resolve().parents[3]
PITCREW = [sys.executable, "-m", "pitcrew.cli"]
KUBECTL = str(Path(sys.executable).with_name("kubectl"))


def pitcrew(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PITCREW, *args], capture_output=True, text=True, timeout=300, check=False
    )


def test_install_is_idempotent_prints_with_dry_run_and_examples_apply_after_it(
    kubeconfig: str, api_client: client.ApiClient
) -> None:
    rbac = client.RbacAuthorizationV1Api(api_client)
    # The objects the e2e stack already runs with: applying them again changes nothing.
    first = pitcrew("install", "--kubeconfig", kubeconfig, "--namespace", NAMESPACE, "--no-policy")
    assert first.returncode == 0, first.stderr
    version = rbac.read_cluster_role("pitcrew-operator").metadata.resource_version
    again = pitcrew("install", "--kubeconfig", kubeconfig, "--namespace", NAMESPACE, "--no-policy")
    assert again.returncode == 0, again.stderr
    shipped = len(install.objects(NAMESPACE, policy=False))  # CRDs, RBAC, admission
    assert f"{shipped} objects applied" in again.stdout
    assert rbac.read_cluster_role("pitcrew-operator").metadata.resource_version == version
    # --dry-run prints every object and applies none.
    elsewhere = f"pitcrew-dry-{uuid.uuid4().hex[:6]}"
    shown = pitcrew("install", "--kubeconfig", kubeconfig, "--namespace", elsewhere, "--dry-run")
    assert shown.returncode == 0, shown.stderr
    kinds = re.findall(r"^kind: (\w+)$", shown.stdout, flags=re.MULTILINE)
    assert kinds.count("CustomResourceDefinition") == len(crdgen.RESOURCES)
    assert kinds[-1] == "GPUHealthPolicy"
    names = [n.metadata.name for n in client.CoreV1Api(api_client).list_namespace().items]
    assert elsewhere not in names
    # The examples are valid against the installed CRDs (server-side dry run: the
    # example policy would select the other tests' nodes).
    applied = subprocess.run(
        [
            KUBECTL,
            "--kubeconfig",
            kubeconfig,
            "apply",
            "--dry-run=server",
            "-f",
            str(ROOT / "examples"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert applied.returncode == 0, applied.stderr


def walkthrough() -> list[str]:
    """The README's walkthrough block, line by line."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- walkthrough:", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_the_readme_walkthrough_takes_a_node_to_quarantine(tmp_path: Path) -> None:
    lines = walkthrough()
    assert lines[0] == "pitcrew devcluster up --with-pitcrew"
    assert len(lines) == 4, "the README promises three commands after `devcluster up`"
    background: list[subprocess.Popen[bytes]] = []
    try:
        for line in lines:
            words = shlex.split(line.removesuffix("&"))
            program = PITCREW if words[0] == "pitcrew" else [KUBECTL]
            command = [*program, *words[1:]]
            if line.endswith("&"):
                log = (tmp_path / f"{words[1]}.log").open("wb")
                background.append(
                    subprocess.Popen(command, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
                )
                continue
            done = subprocess.run(
                command, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
            )
            assert done.returncode == 0, f"{line}: {done.stdout[-2000:]} {done.stderr[-2000:]}"

        def phase() -> str:
            got = subprocess.run(
                [KUBECTL, "--kubeconfig", str(tmp_path / ".devcluster" / "kubeconfig"),
                 "get", "gpunode", "gpu-node-0003", "-o", "json"],
                capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
            if got.returncode:
                return ""
            return str((json.loads(got.stdout).get("status") or {}).get("phase", ""))

        eventually(
            lambda: phase() in ("Quarantined", "Draining", "Remediating", "Validating"),
            timeout=90,
            what=f"gpu-node-0003 quarantined (now {phase()!r})",
        )
    finally:
        for process in background:
            process.terminate()
            process.wait(timeout=30)
        subprocess.run(
            [*PITCREW, "devcluster", "down", "--dir", str(tmp_path / ".devcluster")],
            capture_output=True,
            timeout=120,
            check=False,
        )

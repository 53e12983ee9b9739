"""The operator image, as `make images` wrote it to dist/, runs the operator.

scripts/check-images.sh loads the archive into a store of its own, runs
`pitcrew --version` as the image's user 65532, then the operator from inside the
container with podman (host networking, the kubeconfig mounted read-only) against
the session's devcluster, with the token of the ``pitcrew-operator``
ServiceAccount that ``pitcrew install`` makes: the RBAC the chart ships. The
stack's own operators step aside for the test, so that the Lease and every
decision on the test's fleet are the image's; they are back when it ends.

CI builds the archive before the tests (``make test``); a missing archive fails
the test with what to run, it never skips. An archive built from other sources
than the tree's runs an operator that may not understand the CRDs and agents of
the tree: a failure then names the modules that differ.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import tarfile
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest
from kubernetes import client

from pitcrew.api.vocabulary import OPERATOR_MANAGER
from pitcrew.dev.devcluster import install as install_dev
from pitcrew.dev.stack import SimStack
from pitcrew.kube.client import to_dict
from support.fleet import Fleet, eventually

ROOT = Path(__file__).resolve().parents[3]
CHECK_IMAGES = ROOT / "scripts" / "check-images.sh"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
ARCHIVE = ROOT / "dist" / f"pitcrew-{VERSION}.oci.tar"
"""What `make images` writes for the operator image of this tree's version."""
PACKAGES = {"pitcrew": ROOT / "operator", "gpuhealth": ROOT / "healthchecks"}
"""The import packages in the image's venv, and where the tree holds their sources."""
LEASE = "pitcrew-operator"
FATAL_XID = [{"type": "xid", "gpu": 0, "code": 79}]


@dataclass(frozen=True)
class ImageOperator:
    """The operator running in its image: its Lease identity and the script's output."""

    identity: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def running(self) -> bool:
        """True while it runs; a failed assertion with its output once it has ended."""
        code = self.process.poll()
        assert code is None, f"the image's operator ended with {code}:\n{self.output()}"
        return True


def stack_operators(stack: SimStack) -> list[str]:
    """The names of the operator processes the stack runs now (`python -m pitcrew.cli
    operator ...`)."""
    return [
        name
        for name, process in stack.running.items()
        if process.poll() is None
        and isinstance(process.args, list)
        and process.args[3:4] == ["operator"]
    ]


@pytest.fixture(scope="session")
def operator_archive() -> Path:
    """The archive, checked before the devcluster starts."""
    if not ARCHIVE.is_file():
        pytest.fail(
            f"{ARCHIVE.relative_to(ROOT)} is missing: build it with "
            "`make images IMAGES=pitcrew` (make test does, before the tests)",
            pytrace=False,
        )
    return ARCHIVE


@pytest.fixture
def image_operator(
    operator_archive: Path, pitcrew: SimStack, tmp_path: Path
) -> Iterator[ImageOperator]:
    """scripts/check-images.sh loads ``operator_archive`` and runs the operator from it."""
    kubeconfig = install_dev.service_account_kubeconfig(
        pitcrew.api,
        component="operator",
        namespace=pitcrew.namespace,
        path=tmp_path / "operator.kubeconfig",
    )
    stepped_aside = stack_operators(pitcrew)
    for name in stepped_aside:
        pitcrew.kill(name)  # no goodbye: the image's operator takes the Lease when it expires
    identity = f"image-{uuid.uuid4().hex[:6]}"
    log = tmp_path / "image-operator.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                str(CHECK_IMAGES), "--kubeconfig", str(kubeconfig),
                "--namespace", pitcrew.namespace, "--",
                "--leader-election", "--identity", identity, "--lease-seconds", "4",
                "--resync-seconds", "2", "--metrics-port", "0", "--health-port", "0",
            ],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield ImageOperator(identity=identity, process=process, log=log)
    finally:
        # The script removes its container when it ends (SIGTERM included).
        process.terminate()
        try:
            process.wait(timeout=60)
            stuck = False
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            stuck = True
        for name in stepped_aside:
            pitcrew.start_operator(name)
        assert not stuck, "scripts/check-images.sh did not end within 60 s of SIGTERM"


def lease_holder(api: client.ApiClient, namespace: str) -> str:
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(LEASE, namespace)
    except client.ApiException as error:
        if error.status == 404:
            return ""
        raise
    return str((lease.spec and lease.spec.holder_identity) or "")


def owners(managed_fields: list[dict[str, Any]], *path: str, subresource: str = "") -> set[str]:
    """The field managers that own the field at ``path`` (``spec``, ``unschedulable``)."""
    found = set()
    for entry in managed_fields:
        if entry.get("subresource", "") != subresource:
            continue
        fields = entry.get("fieldsV1") or {}
        for key in path:
            fields = fields.get(f"f:{key}")
            if fields is None:
                break
        else:
            found.add(entry["manager"])
    return found


def image_sources(archive: Path) -> dict[str, bytes]:
    """The packages' modules in the image's venv (``pitcrew/cli/main.py``: contents)."""
    found: dict[str, bytes] = {}
    with tarfile.open(archive) as outer:

        def read(name: str) -> IO[bytes]:
            file = outer.extractfile(name)
            assert file is not None, f"{archive} holds no file {name}"
            return file

        def blob(digest: str) -> IO[bytes]:
            return read("blobs/" + digest.replace(":", "/", 1))

        manifest = json.load(blob(json.load(read("index.json"))["manifests"][0]["digest"]))
        for layer in manifest["layers"]:  # in order: a later layer's file wins
            with tarfile.open(fileobj=blob(layer["digest"]), mode="r|*") as files:
                for member in files:
                    _, inside, module = member.name.partition("/site-packages/")
                    ours = module.split("/")[0] in PACKAGES and module.endswith(".py")
                    content = files.extractfile(member) if inside and ours else None
                    if content is not None:
                        found[module] = content.read()
    return found


def stale_sources(archive: Path) -> list[str]:
    """The modules whose source in the tree is not the one in the image."""
    image = image_sources(archive)
    tree = {
        str(path.relative_to(folder)): path.read_bytes()
        for package, folder in PACKAGES.items()
        for path in (folder / package).rglob("*.py")
    }
    return sorted(m for m in image.keys() | tree.keys() if image.get(m) != tree.get(m))


@contextlib.contextmanager
def noting_a_stale_archive() -> Iterator[None]:
    """A failed assertion says so when the image was built from other sources."""
    try:
        yield
    except AssertionError as error:
        stale = stale_sources(ARCHIVE)
        if not stale:
            raise
        raise AssertionError(
            f"{error}\n{ARCHIVE.relative_to(ROOT)} was built from other sources than this "
            f"tree's ({', '.join(stale[:4])}{', ...' if len(stale) > 4 else ''} differ): "
            "run `make images IMAGES=pitcrew` first"
        ) from error


def test_the_operator_image_leads_and_quarantines_a_node_with_a_fatal_xid(
    image_operator: ImageOperator,
    fleet_factory: type[Fleet],
    api_client: client.ApiClient,
    pitcrew: SimStack,
) -> None:
    leader, namespace = image_operator.identity, pitcrew.namespace
    with noting_a_stale_archive():
        # Loading the archive and the --version check come first: tens of seconds.
        eventually(
            lambda: image_operator.running() and lease_holder(api_client, namespace) == leader,
            timeout=240, interval=1, what=f"the image's operator ({leader}) to take the Lease",
        )  # fmt: skip
        said = image_operator.output()
        assert f"pitcrew {VERSION}" in said  # `pitcrew --version`, as the image's user:
        assert "runs as 65532:65532" in said
        assert f"{leader} is the leader" in said

        fleet = fleet_factory(size=2)
        fleet.policy()
        for name in fleet.nodes:
            fleet.wait_phase(name, "Healthy", timeout=90)
        node = fleet.nodes[0]
        fleet.inject(node, FATAL_XID)
        eventually(lambda: fleet.node(node).spec.unschedulable, timeout=30, what=f"{node} cordoned")
        assert fleet.taints(node)["pitcrew.dev/quarantined"] == "Xid"
        assert "Quarantined" in fleet.history(node)

        # Written by the operator's field manager, and no other operator ran.
        written = to_dict(api_client, fleet.node(node))["metadata"]["managedFields"]
        assert owners(written, "spec", "unschedulable") == {OPERATOR_MANAGER}
        status = fleet.gpunode(node)["metadata"]["managedFields"]
        assert OPERATOR_MANAGER in owners(status, "status", "phase", subresource="status")
        assert stack_operators(pitcrew) == []
        assert image_operator.running()
        assert lease_holder(api_client, namespace) == leader

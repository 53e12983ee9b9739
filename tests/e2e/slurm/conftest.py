"""A real two-node Slurm cluster (slurmctld, two slurmd, munged) for the Slurm tests.

The daemons come from Debian's packages (``make slurm`` installs them). On a
developer's machine without them the tests are skipped; in CI (``CI`` set)
a missing daemon is a failure, so the suite cannot pass by skipping.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from support.slurmcluster import HANG_EPILOG, SlurmCluster, missing_binaries

SLURM_NODES = ["slurm-node-0", "slurm-node-1"]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    missing = missing_binaries()
    if missing:
        reason = f"Slurm is not installed (no {', '.join(missing)}): run `make slurm`"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    directory = tmp_path_factory.mktemp("slurm")
    epilog = directory / "epilog.sh"
    epilog.write_text(f"#!/bin/sh\nwhile [ -f {directory / HANG_EPILOG} ]; do sleep 1; done\n")
    epilog.chmod(0o755)
    with SlurmCluster(directory, SLURM_NODES, extra=[f"Epilog={epilog}"]) as cluster:
        yield cluster

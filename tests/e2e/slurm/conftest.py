"""A real two-node Slurm cluster (slurmctld, two slurmd, munged) for the Slurm tests.

The daemons come from Debian's packages (``make slurm`` installs them). On a
developer's machine without them the tests are skipped; in CI (``CI`` set)
a missing daemon is a failure, so the suite cannot pass by skipping.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from support.slurmcluster import SlurmCluster, missing_binaries

SLURM_NODES = ["slurm-node-0", "slurm-node-1"]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    missing = missing_binaries()
    if missing:
        reason = f"Slurm is not installed (no {', '.join(missing)}): run `make slurm`"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    with SlurmCluster(tmp_path_factory.mktemp("slurm"), SLURM_NODES) as cluster:
        yield cluster

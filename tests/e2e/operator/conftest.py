"""The operator and the simulated agents, running as separate processes.

Brought up by :class:`pitcrew.sim.stack.SimStack`, as the demo and the
benchmarks bring it up: the operator runs out-of-cluster with the token of the
``pitcrew-operator`` service account and exactly the RBAC the chart ships
(:mod:`pitcrew.deploy.rbac`), not cluster-admin. The simulated agents run with
the admin credentials of the devcluster (they stand in for kubelets and GPUs,
not for Pitcrew).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fleet import NAMESPACE, Fleet
from kubernetes import client

from pitcrew.sim.stack import SimStack


@pytest.fixture(scope="session")
def pitcrew(kubeconfig: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimStack]:
    stack = SimStack(
        directory=tmp_path_factory.mktemp("pitcrew"), kubeconfig=kubeconfig, namespace=NAMESPACE
    )
    stack.install()
    stack.start_sim_agents(interval="2s", heartbeat="30s")
    stack.start_operator("operator-a")
    yield stack
    stack.stop_all()


@pytest.fixture
def fleet_factory(api_client: client.ApiClient, pitcrew: SimStack) -> Iterator[type[Fleet]]:
    fleets: list[Fleet] = []

    class Tracked(Fleet):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(api_client, *args, **kwargs)  # type: ignore[arg-type]
            fleets.append(self)

    yield Tracked
    for fleet in fleets:
        fleet.cleanup()


@pytest.fixture
def workload_namespace(core: client.CoreV1Api) -> Iterator[str]:
    name = f"train-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)

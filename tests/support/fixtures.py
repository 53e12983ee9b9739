"""A real kube-apiserver for the end-to-end tests, Pitcrew running on it, and fleets.

One devcluster per test session (startup takes seconds once built); set
``PITCREW_TEST_KUBECONFIG`` to run the suite against a cluster you already
have instead. Tests create what they need with unique names and clean up, so
they can share the cluster.

The operator and the simulated agents run as separate processes, brought up
by :class:`pitcrew.dev.stack.SimStack` as the demo and the benchmarks bring
them up: the operator runs out-of-cluster with the token of the
``pitcrew-operator`` service account and exactly the RBAC the chart ships
(:mod:`pitcrew.deploy.rbac`), not cluster-admin. The simulated agents run with
the admin credentials of the devcluster (they stand in for kubelets and GPUs,
not for Pitcrew). The operator and chaos tests share them.

Most operator tests begin the same way: a private fleet under a policy of its
own, its nodes Healthy. :func:`healthy_fleet` is that prologue; a test that
needs something between those steps (a pod before the policy, a priority class)
takes :func:`fleet_factory` and writes them out.

A pytest plugin (``tests/conftest.py`` registers it): the fixtures are created
only when a test asks for them, so the unit tests never start a devcluster.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from kubernetes import client, config

from gpuhealth.models import get_model
from pitcrew.deploy.install import install_crds
from pitcrew.dev import devcluster
from pitcrew.dev.stack import SimStack
from support.fleet import NAMESPACE, NODE_MAINTENANCE, NODE_MAINTENANCE_SCHEMA, Fleet, crd

E2E_NODES = 4


class HealthyFleet(Protocol):
    """The type of :func:`healthy_fleet`, for a test's signature."""

    def __call__(self, size: int = 2, **spec: Any) -> Fleet: ...


@pytest.fixture(scope="session")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    existing = os.environ.get("PITCREW_TEST_KUBECONFIG")
    if existing:
        yield existing
        return
    directory = Path(tmp_path_factory.mktemp("devcluster"))
    state = devcluster.up(
        directory=directory, node_count=E2E_NODES, gpus_per_node=8, model=get_model("H100")
    )
    try:
        yield state.kubeconfig
    finally:
        devcluster.down(directory=directory, log=lambda _: None)


@pytest.fixture(scope="session")
def api_client(kubeconfig: str) -> client.ApiClient:
    return config.new_client_from_config(config_file=kubeconfig)


@pytest.fixture(scope="session")
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture
def namespace(core: client.CoreV1Api) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="session")
def crds(api_client: client.ApiClient) -> list[str]:
    return install_crds(api_client)


@pytest.fixture(scope="session")
def custom(api_client: client.ApiClient, crds: list[str]) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


@pytest.fixture(scope="session")
def pitcrew(kubeconfig: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimStack]:
    stack = SimStack(
        directory=tmp_path_factory.mktemp("pitcrew"), kubeconfig=kubeconfig, namespace=NAMESPACE
    )
    stack.install()
    # The medik8s NodeMaintenance API, as a cluster with medik8s serves it: the
    # operator honours its requests (it checks for the API every few minutes, so it
    # is served before the operator starts).
    crd(stack.api, *NODE_MAINTENANCE, NODE_MAINTENANCE_SCHEMA, scope="Cluster")
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
def healthy_fleet(fleet_factory: type[Fleet]) -> HealthyFleet:
    """``healthy_fleet(size=2, **spec)``: a fleet of ``size`` nodes under a policy of
    its own (``spec`` over the defaults of :meth:`Fleet.policy`), returned once
    every one of its nodes is Healthy. Cleaned up with the test, as
    :func:`fleet_factory`'s are."""

    def make(size: int = 2, **spec: Any) -> Fleet:
        fleet = fleet_factory(size=size)
        fleet.policy(**spec)
        for node in fleet.nodes:
            fleet.wait_phase(node, "Healthy")
        return fleet

    return make


@pytest.fixture
def workload_namespace(core: client.CoreV1Api) -> Iterator[str]:
    name = f"train-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)

"""The operator and the simulated agents, running as separate processes.

The operator runs out-of-cluster with the token of the ``pitcrew-operator``
service account and exactly the RBAC the chart ships (:mod:`pitcrew.deploy.rbac`),
not cluster-admin. The simulated agents run with the admin credentials of the
devcluster (they stand in for kubelets and GPUs, not for Pitcrew).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fleet import NAMESPACE, Fleet
from kubernetes import client
from processes import Processes

from pitcrew.sim.devcluster import install


@pytest.fixture(scope="session")
def pitcrew(
    kubeconfig: str, api_client: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Processes]:
    directory = tmp_path_factory.mktemp("pitcrew")
    install.install(api_client, namespace=NAMESPACE)
    operator_kubeconfig = install.service_account_kubeconfig(
        api_client,
        component="operator",
        namespace=NAMESPACE,
        path=directory / "operator.kubeconfig",
    )
    processes = Processes(directory, kubeconfig, operator_kubeconfig)
    processes.start(
        "sim-agents",
        "sim-agents",
        "--kubeconfig",
        kubeconfig,
        "--interval",
        "2s",
        "--heartbeat",
        "30s",
        "--metrics-port",
        str(processes.metrics_port("sim-agents")),
    )
    processes.start_operator("operator-a")
    yield processes
    processes.stop_all()


@pytest.fixture
def fleet_factory(api_client: client.ApiClient, pitcrew: Processes) -> Iterator[type[Fleet]]:
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

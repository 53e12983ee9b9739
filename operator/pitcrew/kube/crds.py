"""Install Pitcrew's CRDs into a cluster and wait until they are served.

Used by the demo and the end-to-end tests; production installs them with the
Helm chart. The CRD YAML is read from the package's source tree (``crds/``).
"""

from __future__ import annotations

import time
from pathlib import Path

import yaml
from kubernetes import client

from pitcrew.kube.client import to_dict

CRD_DIR = Path(__file__).resolve().parents[3] / "crds"


def install(
    api: client.ApiClient, *, directory: Path = CRD_DIR, timeout: float = 30.0
) -> list[str]:
    extensions = client.ApiextensionsV1Api(api)
    names = []
    for path in sorted(directory.glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        name = body["metadata"]["name"]
        names.append(name)
        try:
            extensions.create_custom_resource_definition(body)
        except client.ApiException as error:
            if error.status != 409:
                raise
            current = to_dict(api, extensions.read_custom_resource_definition(name))
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            extensions.replace_custom_resource_definition(name, body)
    deadline = time.monotonic() + timeout
    for name in names:
        while not _established(extensions.read_custom_resource_definition(name)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout}s")
            time.sleep(0.2)
    return names


def _established(crd: client.V1CustomResourceDefinition) -> bool:
    conditions = crd.status.conditions if crd.status else None
    return any(c.type == "Established" and c.status == "True" for c in conditions or [])

"""Install what Pitcrew needs into a devcluster, the way the Helm chart would.

CRDs, the namespace, service accounts and least-privilege RBAC (from
:mod:`pitcrew.deploy.rbac`), the agent's admission policy (:mod:`pitcrew.deploy.admission`),
and a kubeconfig per service account (a token from the TokenRequest API) so
that the operator and agents can run out-of-cluster with exactly the
permissions they would have in a pod.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from pitcrew.api.vocabulary import DEFAULT_NAMESPACE, account_name
from pitcrew.deploy import install as deploy_install
from pitcrew.kube.client import to_dict

TOKEN_SECONDS = 24 * 3600


def install(api: client.ApiClient, *, namespace: str = DEFAULT_NAMESPACE) -> None:
    """What ``pitcrew install`` applies, without its default policy (the tests and the
    demo bring their own)."""
    deploy_install.install(api, namespace, policy=False)


def bound_token(
    api: client.ApiClient, *, account: str, namespace: str, pod: dict[str, Any] | None = None
) -> str:
    """A token of ServiceAccount ``account``; with ``pod``, bound to that pod, as a
    projected token in the pod would be (the apiserver then knows the pod's node)."""
    spec: dict[str, Any] = {"expirationSeconds": TOKEN_SECONDS, "audiences": []}
    if pod is not None:
        meta = pod["metadata"]
        spec["boundObjectRef"] = {
            "kind": "Pod",
            "apiVersion": "v1",
            "name": meta["name"],
            "uid": meta["uid"],
        }
    request = client.AuthenticationV1TokenRequest.model_validate({"spec": spec})
    answer = client.CoreV1Api(api).create_namespaced_service_account_token(
        account, namespace, request
    )
    return str(to_dict(api, answer)["status"]["token"])


def service_account_kubeconfig(
    api: client.ApiClient,
    *,
    component: str,
    namespace: str,
    path: Path,
    account: str | None = None,
    bound_pod: dict[str, Any] | None = None,
) -> Path:
    """Write a kubeconfig that authenticates as ``pitcrew-<component>`` (or ``account``).

    With ``bound_pod`` the token is bound to that pod, as a projected token in
    the pod would be: the apiserver then knows the node it runs on."""
    name = account or account_name(component)
    token = bound_token(api, account=name, namespace=namespace, pod=bound_pod)
    configuration = api.configuration
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "devcluster",
                "cluster": {
                    "server": configuration.host,
                    "certificate-authority-data": base64.b64encode(
                        Path(configuration.ssl_ca_cert).read_bytes()
                    ).decode(),
                },
            }
        ],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": "devcluster", "user": name}}],
        "current-context": name,
    }
    path.write_text(yaml.safe_dump(document))
    path.chmod(0o600)
    return path

"""`pitcrew install` applies what the chart installs but the workloads, from the same code."""

from __future__ import annotations

from pathlib import Path

import yaml

from pitcrew.api import crdgen
from pitcrew.deploy import admission, install, rbac
from pitcrew.kube.apply import KINDS, path

ROOT = Path(__file__).resolve().parents[3]


def test_the_objects_are_the_charts_and_the_crds_the_models() -> None:
    found = install.objects("ops")
    crds = [o for o in found if o["kind"] == "CustomResourceDefinition"]
    assert crds == [crdgen.crd(model) for model in crdgen.RESOURCES]
    for obj in [
        *rbac.manifests("ops"),
        *rbac.job_size_manifests("ops"),
        *admission.manifests("ops"),
    ]:
        assert obj in found
    namespace = {"name": "ops", "labels": install.POD_SECURITY}
    assert {"apiVersion": "v1", "kind": "Namespace", "metadata": namespace} in found
    assert admission.training_job_manifests()[0] in found  # confines no one without a Role
    assert found[-1]["kind"] == "GPUHealthPolicy"
    assert [o["kind"] for o in install.objects("ops", policy=False)] == [
        o["kind"] for o in found[:-1]
    ]


def test_the_default_policy_is_the_charts() -> None:
    values = yaml.safe_load((ROOT / "charts" / "pitcrew" / "values.yaml").read_text())
    assert values["policy"]["name"] == install.DEFAULT_POLICY_NAME
    assert values["policy"]["spec"] == install.DEFAULT_POLICY_SPEC


def test_every_object_has_a_path_the_apply_knows() -> None:
    paths = {path(o) for o in install.objects("ops")}
    assert len(paths) == len(install.objects("ops"))  # no two objects at one address
    assert "/api/v1/namespaces/ops" in paths
    assert "/api/v1/namespaces/ops/serviceaccounts/pitcrew-operator" in paths
    assert "/apis/pitcrew.dev/v1alpha1/gpuhealthpolicies/gpu-fleet" in paths
    assert {o["kind"] for o in install.objects("ops")} <= set(KINDS)


def test_dry_run_output_is_every_object_as_yaml() -> None:
    documents = list(yaml.safe_load_all(install.render("ops")))
    assert documents == install.objects("ops")


def test_crds_only_is_the_crds_alone() -> None:
    documents = list(yaml.safe_load_all(install.render("ops", crds_only=True)))
    assert documents == install.crds()
    assert [d["kind"] for d in documents] == ["CustomResourceDefinition"] * len(crdgen.RESOURCES)


def test_a_training_namespace_gets_the_role_the_policy_takes_as_its_parameter() -> None:
    found = install.objects("ops", policy=False, training_namespaces=["team-a"])
    role, binding = (o for o in found if o["metadata"].get("namespace") == "team-a")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "default", "namespace": "team-a"}
    ]
    policy_binding = admission.training_job_manifests()[1]
    assert policy_binding["spec"]["paramRef"]["name"] == binding["metadata"]["name"]
    assert not [
        o
        for o in install.objects("ops")
        if o["kind"] == "RoleBinding" and "training" in o["metadata"]["name"]
    ]

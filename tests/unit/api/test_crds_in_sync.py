"""The committed CRDs are exactly what the API models generate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from pitcrew.api import crdgen

CRD_DIR = Path(__file__).resolve().parents[3] / "crds"


def test_committed_crds_match_the_models() -> None:
    assert crdgen.stale_files(CRD_DIR) == [], "run `pitcrew crds` and commit the result"


def walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = []
    if isinstance(node, dict):
        found.append((path, node))
        for key, value in node.items():
            found.extend(walk(value, f"{path}/{key}"))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(walk(value, f"{path}/{index}"))
    return found


@pytest.mark.parametrize("model", crdgen.RESOURCES, ids=lambda m: m.__name__)
def test_schema_is_structural(model: type[BaseModel]) -> None:
    schema = crdgen.openapi_schema(model)
    for path, node in walk(schema):
        assert "$ref" not in node, path
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string") is True, path
        if "properties" in node:
            assert node.get("type") == "object", path


def test_generated_files_parse_as_crds() -> None:
    for path in sorted(CRD_DIR.glob("*.yaml")):
        document = yaml.safe_load(path.read_text())
        assert document["kind"] == "CustomResourceDefinition"
        assert document["spec"]["scope"] == "Cluster"


def test_chart_ships_the_same_crds() -> None:
    chart_dir = CRD_DIR.parent / "charts" / "pitcrew" / "crds"
    committed = {p.name: p.read_text() for p in CRD_DIR.glob("*.yaml")}
    shipped = {p.name: p.read_text() for p in chart_dir.glob("*.yaml")}
    assert shipped == committed, "copy crds/*.yaml into charts/pitcrew/crds/"

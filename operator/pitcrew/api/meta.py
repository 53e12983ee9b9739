"""Building blocks shared by Pitcrew's API models: base model, durations,
label selectors, conditions.

The pydantic models are the single source of truth: the CRD schemas under
``crds/`` are generated from them (see :mod:`pitcrew.api.crdgen`), and the
operator parses the objects it reads with the same models, so the defaults a
user sees in ``kubectl get -o yaml`` and the ones the code applies are one set.

``cel`` attaches Kubernetes CEL rules (``x-kubernetes-validations``) to a model
or field; the apiserver evaluates them, so a bad object is refused with the
rule's message before Pitcrew ever sees it.
"""

from __future__ import annotations

import datetime
import re
from enum import StrEnum
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

GROUP = "pitcrew.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def cel(
    rule: str, message: str, *, reason: str | None = None, field_path: str | None = None
) -> dict[str, Any]:
    """One ``x-kubernetes-validations`` entry."""
    entry: dict[str, Any] = {"rule": rule, "message": message}
    if reason:
        entry["reason"] = reason
    if field_path:
        entry["fieldPath"] = field_path
    return entry


def validations(*rules: dict[str, Any]) -> dict[str, Any]:
    """``json_schema_extra`` that attaches CEL rules to a model or field."""
    return {"x-kubernetes-validations": list(rules)}


def _positive_duration(name: str) -> dict[str, Any]:
    return validations(cel("duration(self) > duration('0s')", f"{name} must be longer than 0s"))


def duration_field(default: str, description: str, *, name: str) -> Any:
    """A Go-style duration string (``90s``, ``1h30m``) that must be positive."""
    return Field(
        default=default,
        description=description,
        pattern=DURATION_PATTERN,
        max_length=32,
        json_schema_extra=_positive_duration(name),
    )


def parse_duration(text: str) -> datetime.timedelta:
    """Parse the duration strings the schema admits."""
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"invalid duration {text!r}; use e.g. 90s, 10m, 1h30m")
    seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(text))
    return datetime.timedelta(seconds=seconds)


IntOrPercent = Annotated[
    int | str,
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
        }
    ),
]


class ApiModel(BaseModel):
    """Base for every API type: camelCase on the wire, unknown fields refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class Resource(ApiModel):
    """A top-level custom resource: what the CRD generator needs to know about it."""

    KIND: ClassVar[str]
    PLURAL: ClassVar[str]
    SHORT_NAMES: ClassVar[list[str]]
    PRINTER_COLUMNS: ClassVar[list[dict[str, str]]]


class SelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class LabelSelectorRequirement(ApiModel):
    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.operator in ['In', 'NotIn'] ? size(self.values) > 0 : true",
                "operators In and NotIn need at least one value",
            ),
            cel(
                "self.operator in ['Exists', 'DoesNotExist'] ? size(self.values) == 0 : true",
                "operators Exists and DoesNotExist take no values",
            ),
        )
    )

    key: str = Field(min_length=1, max_length=317)
    operator: SelectorOperator
    values: list[Annotated[str, Field(max_length=63)]] = Field(default_factory=list, max_length=64)


class LabelSelector(ApiModel):
    """A Kubernetes label selector. Empty selectors are refused: an empty
    selector matches every node, which is never what a health policy means."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "size(self.matchLabels) > 0 || size(self.matchExpressions) > 0",
                "the selector must name at least one label; an empty selector would "
                "match every node in the cluster",
            ),
        )
    )

    match_labels: dict[str, Annotated[str, Field(max_length=63)]] = Field(
        default_factory=dict, json_schema_extra={"maxProperties": 32}
    )
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list, max_length=32)


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ApiModel):
    """A Kubernetes-style condition (metav1.Condition)."""

    type: str = Field(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]"
        r"([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?"
        r"[A-Za-z0-9])$",
    )
    status: ConditionStatus
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*"
        r"[A-Za-z0-9_])?$",
    )
    message: str = Field(default="", max_length=32768)
    last_transition_time: datetime.datetime
    observed_generation: int = Field(default=0, ge=0)


CONDITIONS_SCHEMA: JsonDict = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
}


def conditions_field() -> Any:
    return Field(default_factory=list, max_length=32, json_schema_extra=CONDITIONS_SCHEMA)

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

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    WithJsonSchema,
)
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict
from pydantic_core import core_schema

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


class Duration(datetime.timedelta):
    """A Go-style duration (``90s``, ``1h30m``), parsed once where it enters.

    It *is* a :class:`~datetime.timedelta`, so the code does arithmetic with it
    directly (``now - since > spec.timeout``) and never parses a string again;
    it remembers the text it was written as, so it goes back to the apiserver
    (and into the CRD schema's defaults) exactly as the user wrote it. The
    schema admits the same form (pattern) and the apiserver checks that it is
    positive (CEL), so a policy the apiserver stored always parses here.
    """

    _text: str

    def __new__(cls, text: str) -> Duration:
        if not isinstance(text, str) or not re.fullmatch(DURATION_PATTERN, text):
            raise ValueError(f"invalid duration {text!r}; use e.g. 90s, 10m, 1h30m")
        seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(text))
        value = super().__new__(cls, seconds=seconds)
        value._text = text
        return value

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"Duration({self._text!r})"

    def __reduce__(self) -> tuple[type[Duration], tuple[str]]:
        return (Duration, (self._text,))

    @classmethod
    def _validate(cls, value: Any) -> Duration:
        return value if isinstance(value, Duration) else cls(value)

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls._validate,
            serialization=core_schema.plain_serializer_function_ser_schema(str),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonDict:
        return {"type": "string", "pattern": DURATION_PATTERN, "maxLength": 32}


def duration_field(default: str, description: str, *, name: str) -> Any:
    """A positive :class:`Duration` field with its default, description and CEL rule."""
    return Field(
        default=Duration(default),
        description=description,
        json_schema_extra=_positive_duration(name),
    )


Timestamp = AwareDatetime
"""A point in time with its UTC offset. A naive datetime is refused: it would be read
as local time on one machine and UTC on another, and every duration Pitcrew computes
from it (drain timeouts, heartbeats, lemon windows) would be off by hours."""

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
    PRINTER_COLUMNS: ClassVar[list[dict[str, str | int]]]


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
    last_transition_time: Timestamp
    observed_generation: int = Field(default=0, ge=0)


CONDITIONS_SCHEMA: JsonDict = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
}


def conditions_field() -> Any:
    return Field(default_factory=list, max_length=32, json_schema_extra=CONDITIONS_SCHEMA)

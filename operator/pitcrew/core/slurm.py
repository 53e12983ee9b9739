"""Slurm's view of its nodes, read from the output of its own tools, and which Slurm
node a Kubernetes node is.

Pure: :mod:`pitcrew.slurm.control` runs ``scontrol`` and ``squeue``; these functions
read what they print. A malformed entry is reported with its place and the rest is
still read, so one odd node never hides the fleet from the operator.

A Kubernetes node's Slurm name comes from its slurmd pod (a pod in the policy's
Slurm namespace carrying ``nodeNameLabel``: Slinky's NodeSet pods) or, without
one, is its own name. Tenants may run pods with any label in their own
namespaces, and may have root on the node (so they can edit its Node labels);
neither names a Slurm node here. A name must be one plain Slurm node name: a
hostlist such as ``gpu[1-64]`` or a list ``a,b`` would make one update drain many
nodes, so it is refused, and a Slurm name two Kubernetes nodes claim is used for
neither. Kubernetes often names a node by its FQDN where Slurm names it by its
short host name (or the other way round): a name Slurm does not list stands for the
one Slurm node that is its short form or whose short form it is (:func:`matches`),
never for two.
"""

from __future__ import annotations

import json
import re
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pitcrew.api.errors import PitcrewError
from pitcrew.api.policy import SlurmSpec
from pitcrew.core.views import SlurmNodeView

NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
"""One Slurm node name: no hostlist brackets, commas or spaces."""


class MalformedSlurmOutputError(PitcrewError, ValueError):
    """Output of a Slurm tool that cannot be read at all."""


T = TypeVar("T")


@dataclass(frozen=True)
class Read(Generic[T]):
    """What was read, and a sentence for each entry that could not be."""

    items: T
    problems: tuple[str, ...] = ()
    failed: Mapping[str, str] = field(default_factory=dict)
    """The entries that could not be read, by the name they carry (where it is plain):
    such a node is one of unknown state, not one Slurm does not list."""

    @property
    def whole(self) -> bool:
        """Every entry that could not be read carries its name: a name found nowhere
        is known to be absent."""
        return len(self.failed) == len(self.problems)


def parse_nodes(text: str) -> Read[dict[str, SlurmNodeView]]:
    """``scontrol --json show node`` (Slurm 23.02 and later) or ``sinfo --json`` (21.08
    to 22.05, whose scontrol has no JSON): ``{"nodes": [...]}``, one object per node.
    Up to 22.05 ``state`` is one lower-case word with its flags in ``state_flags``
    (``"allocated"``, ``["DRAIN"]``); from 23.02 ``state`` is a list of upper-case
    words (``["IDLE", "DRAIN"]``). Both read as the base state, then the flags."""
    try:
        document = json.loads(text)
    except ValueError as error:
        raise MalformedSlurmOutputError(f"scontrol printed no JSON: {error}") from None
    entries = document.get("nodes") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise MalformedSlurmOutputError("scontrol's JSON has no list of nodes")
    nodes: dict[str, SlurmNodeView] = {}
    problems: list[str] = []
    failed: dict[str, str] = {}
    for index, entry in enumerate(entries):
        try:
            node = _node(entry)
        except ValueError as error:
            problems.append(f"node {index + 1} of {len(entries)}: {error}")
            name = entry.get("name") if isinstance(entry, dict) else None
            if isinstance(name, str) and NODE_NAME.match(name):
                failed[name] = str(error)
            continue
        nodes[node.name] = node
    return Read(nodes, tuple(problems), failed)


def _node(entry: Any) -> SlurmNodeView:
    if not isinstance(entry, dict):
        raise ValueError("not an object")
    name = entry.get("name")
    if not isinstance(name, str) or not NODE_NAME.match(name):
        raise ValueError(f"no plain node name ({name!r})")
    state = entry.get("state")
    words = [state] if isinstance(state, str) else state
    if not isinstance(words, list) or not words or not all(isinstance(w, str) for w in words):
        raise ValueError(f"{name}: unreadable state {state!r}")
    flags = entry.get("state_flags") or []
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise ValueError(f"{name}: unreadable state_flags {flags!r}")
    states = tuple(dict.fromkeys(w.upper() for w in [*words, *flags]))
    reason = entry.get("reason")
    return SlurmNodeView(name=name, states=states, reason=reason if isinstance(reason, str) else "")


def parse_jobs(text: str) -> Read[tuple[tuple[str, str], ...]]:
    """``squeue -h -o '%i|%k'``: each line a job id and its comment (``(null)`` when it
    has none). A line without a numeric id is reported by its number."""
    jobs: list[tuple[str, str]] = []
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        job, _, comment = line.partition("|")
        if not re.fullmatch(r"\d+(_\d+)?(\+\d+)?", job.strip()):
            problems.append(f"squeue line {number}: no job id in {line[:80]!r}")
            continue
        jobs.append((job.strip(), "" if comment.strip() == "(null)" else comment.strip()))
    return Read(tuple(jobs), tuple(problems))


def matches(
    name: str, listed: Container[str], dotted: Mapping[str, tuple[str, ...]]
) -> tuple[str, ...]:
    """The Slurm nodes ``name`` stands for: itself when Slurm lists it; else the node
    that is its short form (``gpu-1`` for ``gpu-1.example.com``: Slurm's default
    NodeName is the short host name) and the nodes whose short form it is (``dotted``,
    from :func:`by_short_name`). More than one is ambiguous: the caller uses none."""
    if name in listed:
        return (name,)
    short = name.split(".", 1)[0]
    found = (short,) if short != name and short in listed else ()
    return found + tuple(n for n in dotted.get(name, ()) if n != name)


def by_short_name(names: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """The Slurm names that hold a dot, by their short form (the part before it)."""
    index: dict[str, list[str]] = {}
    for name in names:
        if "." in name:
            index.setdefault(name.split(".", 1)[0], []).append(name)
    return {short: tuple(sorted(full)) for short, full in index.items()}


def slurm_name(node: str, pods: Iterable[Mapping[str, Any]], spec: SlurmSpec) -> tuple[str, str]:
    """The Slurm node name of Kubernetes node ``node`` and the ``namespace/name`` of its
    slurmd pod (empty when it has none): a running pod in ``spec.namespace`` labelled
    ``spec.nodeNameLabel``, else the node's own name. Empty name: none that is safe."""
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("namespace") != spec.namespace or meta.get("deletionTimestamp"):
            continue
        value = (meta.get("labels") or {}).get(spec.node_name_label)
        if value is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        return (value if NODE_NAME.match(str(value)) else ""), key
    return (node if NODE_NAME.match(node) else ""), ""

"""What a cordon, uncordon or taint action changes on a Node, computed purely.

The Kubernetes adapter (:mod:`pitcrew.kube.nodes`) sends exactly this edit
(guarded by the Node's resourceVersion), and the property tests apply the
same function to simulated nodes, so "Pitcrew never undoes a cordon it did
not make" is checked on the code that decides it:

- a cordon on a schedulable node records ``pitcrew.dev/cordoned-by=pitcrew``;
  a cordon on a node someone else cordoned adds Pitcrew's taint but does not
  claim the cordon;
- an uncordon removes Pitcrew's taints, and lifts the cordon only when the
  annotation says Pitcrew made it;
- the annotation is dropped whenever the node is schedulable (a person
  uncordoned it): left behind, it would make a person's *next* cordon read as
  Pitcrew's, and Pitcrew would lift it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import assert_never

from pitcrew.api.vocabulary import CORDONED_BY, CORDONED_BY_VALUE, PITCREW_TAINTS
from pitcrew.core import actions as a
from pitcrew.core.views import NodeView, Taint


@dataclass(frozen=True)
class NodeEdit:
    unschedulable: bool
    taints: tuple[Taint, ...]
    annotations: dict[str, str | None]
    """Annotations to set; ``None`` removes one."""


NodeAction = a.Cordon | a.Uncordon | a.SetTaint | a.RemoveTaint


def _with_taint(taints: tuple[Taint, ...], taint: Taint) -> tuple[Taint, ...]:
    return (*[t for t in taints if t.key != taint.key], taint)


def plan(node: NodeView, action: NodeAction) -> NodeEdit | None:
    """The edit that carries out ``action`` on ``node``; None when there is nothing to do."""
    match action:
        case a.Cordon(taint=key, value=value):
            taints = _with_taint(node.taints, Taint(key, value[:63]))
            annotations: dict[str, str | None] = {}
            if not node.unschedulable:
                annotations[CORDONED_BY] = CORDONED_BY_VALUE
            edit = NodeEdit(True, taints, annotations)
        case a.Uncordon():
            taints = tuple(t for t in node.taints if t.key not in PITCREW_TAINTS)
            if node.cordoned_by_pitcrew or node.stale_cordon_claim:
                edit = NodeEdit(False, taints, {CORDONED_BY: None})
            else:
                edit = NodeEdit(node.unschedulable, taints, {})
        case a.SetTaint(taint=key, value=value, replaces=old):
            if old and not node.has_taint(old):
                return None  # moved on by someone else: nothing to replace
            kept = tuple(t for t in node.taints if not old or t.key != old)
            edit = NodeEdit(node.unschedulable, _with_taint(kept, Taint(key, value[:63])), {})
        case a.RemoveTaint(taint=key):
            edit = NodeEdit(node.unschedulable, tuple(t for t in node.taints if t.key != key), {})
        case _:
            assert_never(action)
    changed_annotations = any(node.annotations.get(k) != v for k, v in edit.annotations.items())
    if (
        edit.unschedulable == node.unschedulable
        and set(edit.taints) == set(node.taints)
        and not changed_annotations
    ):
        return None
    return edit


def apply(node: NodeView, edit: NodeEdit) -> NodeView:
    annotations = {
        k: v for k, v in {**node.annotations, **edit.annotations}.items() if v is not None
    }
    return replace(
        node, unschedulable=edit.unschedulable, taints=edit.taints, annotations=annotations
    )

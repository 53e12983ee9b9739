"""No module of ``pitcrew`` or ``gpuhealth`` is in an import cycle.

The graph counts the imports under ``if TYPE_CHECKING:`` too: a cycle that only the
type checker sees still means two modules that cannot be read, tested or moved one
without the other. A lower module that needs a higher one's object declares a small
``Protocol`` of what it uses, or the shared value types move down a layer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grimp
import pytest

PACKAGES = ("pitcrew", "gpuhealth")


def import_graph(*packages: str) -> grimp.ImportGraph:
    return grimp.build_graph(*packages, exclude_type_checking_imports=False, cache_dir=None)


def strongly_connected(graph: grimp.ImportGraph) -> Iterator[set[str]]:
    """Tarjan's algorithm, iterative: the sets of modules that reach each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, edges = work[-1]
            for imported in edges:
                if imported not in index:
                    index[imported] = low[imported] = len(index)
                    stack.append(imported)
                    on_stack.add(imported)
                    work.append(
                        (imported, iter(sorted(graph.find_modules_directly_imported_by(imported))))
                    )
                    break
                if imported in on_stack:
                    low[module] = min(low[module], index[imported])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        yield component


def a_cycle_through(graph: grimp.ImportGraph, component: set[str]) -> list[str]:
    """The shortest import cycle from the component's first module back to itself."""
    start = min(component)
    cycles = [
        [start, *chain]
        for imported in graph.find_modules_directly_imported_by(start)
        if imported in component
        and (chain := graph.find_shortest_chain(importer=imported, imported=start))
    ]
    return min(cycles, key=len)


def cycles(graph: grimp.ImportGraph) -> list[str]:
    """One cycle per set of modules that import each other, and the whole set if larger."""
    found = []
    for component in strongly_connected(graph):
        cycle = a_cycle_through(graph, component)
        among = (
            f" (all of {', '.join(sorted(component))})" if len(component) > len(cycle) - 1 else ""
        )
        found.append(" -> ".join(cycle) + among)
    return found


def test_no_module_is_in_an_import_cycle() -> None:
    found = cycles(import_graph(*PACKAGES))
    assert not found, "import cycles (TYPE_CHECKING imports included):\n" + "\n".join(found)


def test_a_cycle_only_the_type_checker_sees_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "cyclic"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cyclic.high import High\n"
    )
    (package / "high.py").write_text("from cyclic.low import low\n")
    (package / "alone.py").write_text("import cyclic.low\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cycles(import_graph("cyclic")) == ["cyclic.high -> cyclic.low -> cyclic.high"]

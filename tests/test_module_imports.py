"""No import circle in the library, of two modules or of more (``ykafka.admin.cli`` and ``ykafka.admin.failover``
did; later four ``devstack`` modules did, in a loop a pairwise check could not see): modules in a circle are one
concern split apart, or a seam drawn in the wrong place. Every import counts, at the top, inside a function or
under ``if TYPE_CHECKING:`` (a type-only import is still a tie a reader follows). Read from the source, nothing
imported."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import ROOT

TOPS = ("ykafka", "metaserver", "pipeline")


def _imports(path: Path, package: str) -> set[str]:
    """Every module ``path`` may import: absolute, relative (resolved against ``package``) and ``from m import x``
    as both ``m`` and ``m.x`` (x may be a submodule)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found |= {module, *(f"{module}.{alias.name}" for alias in node.names)}
    return found


def _graph() -> dict[str, set[str]]:
    graph = {}
    for top in TOPS:
        for path in sorted((ROOT / top).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            package = name if path.name == "__init__.py" else name.rpartition(".")[0]
            graph[name] = _imports(path, package)
    return graph


def _edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Imports between library modules, without a package's ties to its own modules (``ykafka`` exports
    ``Producer`` from ``ykafka.producer``, which imports ``ykafka.errors`` as ``from ykafka import errors``)."""
    return {a: {b for b in deps if b in graph and b != a and not (a.startswith(f"{b}.") or b.startswith(f"{a}."))}
            for a, deps in graph.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: every strongly connected component of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_circles_finds_loops_of_any_length() -> None:
    loop4 = {"a": {"b"}, "b": {"c"}, "c": {"d"}, "d": {"a"}, "e": {"a"}}
    assert circles(loop4) == [["a", "b", "c", "d"]]
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"c"}}) == [["a", "b"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_circle_in_the_library() -> None:
    graph = _graph()
    assert "ykafka.admin.failover" in graph["ykafka.admin.cli"]  # the reader sees a real import
    assert "metaserver.services" in graph["metaserver.kafka.reconciler"]
    assert circles(_edges(graph)) == []

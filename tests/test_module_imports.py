"""No two modules of the library import each other, at the top or inside a function (``ykafka.admin.cli`` and
``ykafka.admin.failover`` did): a pair that does is one concern split in two, or a seam drawn in the wrong place.
Imports under ``if TYPE_CHECKING:`` do not count (they never run). Read from the source, nothing imported."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import ROOT

TOPS = ("ykafka", "metaserver", "pipeline")


def _imports(path: Path, package: str) -> set[str]:
    """Every module ``path`` may import: absolute, relative (resolved against ``package``) and ``from m import x``
    as both ``m`` and ``m.x`` (x may be a submodule)."""
    tree = ast.parse(path.read_text())
    typing_only = {id(node) for test in ast.walk(tree) if isinstance(test, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(test.test) for stmt in test.body for node in ast.walk(stmt)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
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


def test_no_two_library_modules_import_each_other() -> None:
    graph = _graph()
    assert "ykafka.admin.failover" in graph["ykafka.admin.cli"]  # the reader sees a real import
    mutual = sorted({tuple(sorted((a, b))) for a, deps in graph.items() for b in deps
                     if b in graph and b != a and a in graph[b]
                     and not (a.startswith(f"{b}.") or b.startswith(f"{a}."))})  # a package and its own module
    assert mutual == []

"""The package's import graph points one way (see `docs/architecture.md`).

Every module of `src/clearsight` is read with `ast`: its static imports, at module level and
inside functions alike (a function-level import is still a dependency, only a later one).
The graph must have no cycle, and no model module may import the engine, the exporter or
the CLI: models sit below all three.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "clearsight"
# Layers a model module must never import.
ABOVE_MODELS = ("clearsight.engine", "clearsight.export", "clearsight.cli")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest known module that `name` is or lies in (`a.b.c` -> `a.b` if `c` is a name)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that `module` imports anywhere in its source."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import mod` imports the submodule `pkg.mod` when there is one
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        for n in names:
            if n.split(".")[0] != PACKAGE:
                continue
            target = _resolve(n, known)
            if target is not None and target != module:
                found.add(target)
    return found


@functools.cache
def import_graph() -> dict[str, set[str]]:
    known = _modules()
    return {m: _imports(m, p, known) for m, p in known.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a closed path) per strongly connected component with more than one
    module (Tarjan's algorithm, iterative enough for this package's depth)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_path_in(graph, comp) for comp in components]


def _path_in(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    """A closed import path through `comp`'s first module, for the failure message."""
    members, start = set(comp), comp[0]
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start, *reversed(path[:-1]), start] if v != start else [start, start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def test_the_walker_sees_module_and_function_level_imports() -> None:
    graph = import_graph()
    # module level
    assert "clearsight.models.registry" in graph["clearsight.models.rescan"]
    # `from clearsight.models import identity, ...` in a package __init__
    assert "clearsight.models.identity" in graph["clearsight.models"]
    # function level (the API imports what each command runs lazily)
    assert "clearsight.model_audit" in graph["clearsight.api.models"]


def test_find_cycles_reports_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle() -> None:
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize(
    "module", sorted(m for m in _modules() if m.startswith("clearsight.models"))
)
def test_models_never_import_the_layers_above(module: str) -> None:
    bad = sorted(
        t
        for t in import_graph()[module]
        if any(t == a or t.startswith(a + ".") for a in ABOVE_MODELS)
    )
    assert not bad, f"{module} imports {bad}; models sit below the engine, export and CLI"


CONCRETE_MODELS = ("clearsight.models.rescan", "clearsight.models.mbcnn")


@pytest.mark.parametrize(
    "module", ["clearsight.engine.inference", "clearsight.export.onnx", "clearsight.model_audit"]
)
def test_engine_exporter_and_auditor_ask_the_contract_not_a_class(module: str) -> None:
    """They reach models through `models/contract.py` only, never a concrete architecture."""
    bad = sorted(t for t in import_graph()[module] if t.startswith(CONCRETE_MODELS))
    assert not bad, f"{module} imports {bad}; ask the model contract instead"

"""The package's layers (docs/architecture.md): a module imports only its own layer and those below.

A lower layer that reached up (the runtime importing a feature, a transport importing the
runtime) would make the layers a tangle that every test drags in whole; this walks every
module's imports, ``TYPE_CHECKING`` and function-local ones included, and refuses that.
Within a layer, no two modules may import each other, directly or round a loop: an import
moved into a function or under ``TYPE_CHECKING`` only hides such a cycle, so those count too.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path

import babelq

ROOT = Path(babelq.__file__).resolve().parent

#: top-level package or module -> its layer (lower imports nothing higher)
LAYER = {
    "errors": 0, "urls": 0, "envelope": 0, "extras": 0,
    "bindings": 1,
    "transports": 2,
    "runtime": 3,
    "idempotency": 4, "schema": 4, "gdpr": 4, "tracing": 4, "outbox": 4, "metrics": 4, "features": 4,
    "testing": 4,
    "spark": 5,
    "pipelines": 6, "conformance": 6,
    "cli": 7,
    "integrations": 8,
}  # fmt: skip


def _imports(path: Path) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    return [name for name in found if name.startswith("babelq.")]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _edges(path: Path, modules: Collection[str]) -> set[str]:
    """The package's modules ``path`` imports: ``from a import b`` is module ``a.b`` when that is
    one, else ``a`` (``b`` is then a name in it)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name in modules}


def import_cycles(graph: Mapping[str, Collection[str]]) -> list[list[str]]:
    """Every group of modules that import one another round a loop (strongly connected), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        # iterative Tarjan: a recursive one would hit the recursion limit on a long chain
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    break
                if succ in stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = stack[stack.index(node) :]
                    del stack[stack.index(node) :]
                    if len(group) > 1 or node in graph.get(node, ()):
                        cycles.append(sorted(group))
    return sorted(cycles)


def test_no_import_cycle_between_modules() -> None:
    paths = {_module_name(path): path for path in ROOT.rglob("*.py")}
    graph = {name: _edges(path, paths) for name, path in paths.items()}
    assert import_cycles(graph) == []


def test_the_cycle_check_sees_a_loop_and_nothing_else() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "d"}, "e": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"], ["d"]]
    assert import_cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_every_top_level_module_has_a_layer() -> None:
    tops = {p.name.removesuffix(".py") for p in ROOT.iterdir() if p.suffix == ".py" or p.is_dir()}
    tops -= {"__pycache__"}
    unplaced = tops - set(LAYER) - {"__init__", "__main__"}
    assert not unplaced, f"add these to LAYER and docs/architecture.md: {sorted(unplaced)}"


def test_no_module_imports_a_higher_layer() -> None:
    upward: list[str] = []
    for path in sorted(ROOT.rglob("*.py")):
        top = path.relative_to(ROOT).parts[0].removesuffix(".py")
        if top in ("__init__", "__main__"):
            continue
        for name in _imports(path):
            other = name.split(".")[1]
            if LAYER.get(other, 99) > LAYER[top]:
                upward.append(f"{path.relative_to(ROOT)} imports {name} ({top} is below {other})")
    assert upward == []


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("if True:\n    from babelq.pipelines import settle\nimport babelq.envelope\n")
    assert sorted(_imports(module)) == ["babelq.envelope", "babelq.pipelines"]

"""The package's layers (docs/architecture.md): a module imports only its own layer and those below.

A lower layer that reached up (the runtime importing a feature, a transport importing the
runtime) would make the layers a tangle that every test drags in whole; this walks every
module's imports, ``TYPE_CHECKING`` and function-local ones included, and refuses that.
"""

from __future__ import annotations

import ast
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

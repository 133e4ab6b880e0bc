"""``MODULE:ATTR`` specs: one loader for ``babelq worker --app`` and ``babelq consume --app``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from babelq.errors import ConfigurationError
from babelq.runtime.loading import load_object


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "spec_target.py").write_text("class Box:\n    inner = 42\n\nvalue = 'v'\n")
    (tmp_path / "spec_raises.py").write_text("raise RuntimeError('boom at import')\n")
    (tmp_path / "spec_needs_extra.py").write_text("import jsonschema\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "jsonschema", None)  # as if babelq[schema] were not installed
    for name in ("spec_target", "spec_raises", "spec_needs_extra"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield tmp_path
    for name in ("spec_target", "spec_raises", "spec_needs_extra"):
        sys.modules.pop(name, None)


def _load(spec: str, default_attr: str | None = None) -> object:
    return load_object(spec, option="--app", example="m:a", default_attr=default_attr)


def test_a_dotted_module_and_a_py_file_name_the_same_object(here: Path) -> None:
    assert _load("spec_target:value") == "v"
    assert _load("spec_target:Box.inner") == 42  # a dotted attribute path
    assert _load(f"{here}/spec_target.py:Box.inner") == 42
    assert _load("./spec_target.py", default_attr="value") == "v"


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("nocolon", "'nocolon': expected MODULE:ATTR (a dotted module or a .py file), e.g. m:a"),
        (":value", "':value': expected MODULE:ATTR"),
        ("spec_target:", "'spec_target:': expected MODULE:ATTR"),
        ("no_such_mod:app", "'no_such_mod:app': no module named 'no_such_mod' (run from the directory"),
        ("no_such_pkg.mod:app", "no module named 'no_such_pkg'"),
        ("./missing.py:app", "'./missing.py:app': no file missing.py"),
        ("spec_raises:app", "importing 'spec_raises' failed: RuntimeError: boom at import"),
        ("./spec_raises.py:app", "importing './spec_raises.py' failed: RuntimeError: boom at import"),
        ("spec_needs_extra:app", "importing 'spec_needs_extra' failed: import of jsonschema halted"),
        ("spec_target:Box.nope", "'spec_target:Box.nope': 'spec_target' has no attribute 'Box.nope'"),
    ],
)
def test_every_way_to_name_nothing_is_one_line_naming_the_option_and_spec(
    here: Path, spec: str, says: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        _load(spec)
    text = str(caught.value)
    assert text.startswith(f"--app {spec!r}: ") and says in text and "\n" not in text, text


def test_a_missing_optional_dependency_says_which_extra(here: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"pip install 'babelq\[schema\]'"):
        _load("spec_needs_extra:app")

"""What ``dev.py`` installs: the demo's extras for ``demo``/``babelq``, the development set for
``test``/``bench`` on top of them in the same venv, and a reinstall when pyproject.toml changes."""

from __future__ import annotations

import importlib.util
import json

from conftest import ROOT

# dev.py sits at the repository root, which is not on the tests' import path
_spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
assert _spec is not None and _spec.loader is not None
dev = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dev)
DEMO_EXTRAS = dev.DEMO_EXTRAS
extras_to_install = dev.extras_to_install

SHA = "a" * 64


def _stamp(extras: list[str], sha: str = SHA) -> str:
    return json.dumps({"pyproject": sha, "extras": extras})


def test_a_fresh_venv_gets_only_the_demos_extras_for_the_demo() -> None:
    assert extras_to_install("", SHA, DEMO_EXTRAS) == sorted(DEMO_EXTRAS)
    assert "dev" not in dev.EXTRAS["demo"] and "dev" not in dev.EXTRAS["babelq"]


def test_the_demo_then_the_tests_adds_the_development_set_once() -> None:
    after_demo = _stamp(sorted(DEMO_EXTRAS))
    assert extras_to_install(after_demo, SHA, DEMO_EXTRAS) is None
    assert extras_to_install(after_demo, SHA, dev.EXTRAS["test"]) == ["dev"]
    after_test = _stamp(["dev"])
    for cmd in ("demo", "babelq", "test", "bench"):  # dev holds every extra: nothing more
        assert extras_to_install(after_test, SHA, dev.EXTRAS[cmd]) is None


def test_a_changed_pyproject_reinstalls_what_was_there_and_what_is_wanted() -> None:
    assert extras_to_install(_stamp(["dev"], sha="b" * 64), SHA, DEMO_EXTRAS) == ["dev"]
    assert extras_to_install(_stamp(["redis"], sha="b" * 64), SHA, ("spark",)) == ["redis", "spark"]


def test_the_older_bare_hash_stamp_means_the_development_set() -> None:
    assert extras_to_install(SHA + "\n", SHA, DEMO_EXTRAS) is None
    assert extras_to_install("b" * 64, SHA, DEMO_EXTRAS) == ["dev"]
    assert extras_to_install("[1, 2]", SHA, DEMO_EXTRAS) == sorted(DEMO_EXTRAS)


def test_an_unknown_command_installs_nothing() -> None:
    assert dev.main(["nosuchcommand"]) == 2

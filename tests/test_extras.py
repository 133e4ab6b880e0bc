"""Optional dependencies: one import helper, one line naming what needed it and the extra."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from babelq.errors import ConfigurationError
from babelq.extras import EXTRAS, install_hint, missing_extra, optional_import


def test_an_installed_module_is_returned() -> None:
    assert optional_import("json", needed_for="x") is sys.modules["json"]


def test_a_missing_module_names_what_needed_it_and_the_extra() -> None:
    with pytest.raises(ConfigurationError) as caught:
        optional_import("redis_not_here", needed_for="RedisStore", extra="redis")
    assert str(caught.value) == (
        "RedisStore needs the optional dependency 'redis_not_here': pip install 'babelq[redis]'"
    )
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)


def test_the_extra_defaults_to_the_one_that_installs_the_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jsonschema", None)  # an import of it fails as if not installed
    with pytest.raises(ConfigurationError) as caught:
        optional_import("jsonschema", needed_for="payload schema validation")
    text = str(caught.value)
    assert text.startswith("payload schema validation needs the optional dependency 'jsonschema': ")
    assert "pip install 'babelq[schema]'" in text
    assert "(import of jsonschema halted" in text  # more than "No module named": the detail follows
    assert "\n" not in text


def test_a_module_no_extra_installs_is_still_one_line() -> None:
    with pytest.raises(ConfigurationError, match=r"^x needs the optional dependency 'nope_not_here'$"):
        optional_import("nope_not_here", needed_for="x")


def test_missing_extra_maps_only_optional_dependencies() -> None:
    assert missing_extra(ModuleNotFoundError(name="pyspark.sql")) == (
        "needs the optional dependency 'pyspark.sql': pip install 'babelq[spark]'"
    )
    assert missing_extra(ModuleNotFoundError(name="somethingelse")) is None
    assert missing_extra(ImportError("no name")) is None
    assert install_hint("proton.utils") == (
        "needs the optional dependency 'proton.utils': pip install 'babelq[artemis]'"
    )


def test_every_extra_named_is_declared_in_pyproject() -> None:
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text("utf-8"))
    assert set(EXTRAS.values()) <= set(pyproject["project"]["optional-dependencies"])

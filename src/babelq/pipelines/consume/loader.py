"""``MODULE:ATTR`` to a :class:`~babelq.pipelines.consume.Pipeline`: what ``babelq consume --app`` names.

MODULE is a dotted module (imported with the working directory on ``sys.path``, as ``python -m``
does) or a path to a ``.py`` file; ATTR defaults to ``pipeline``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from babelq.errors import ConfigurationError
from babelq.pipelines.consume.api import Pipeline


def load_pipeline(spec: str, *, option: str = "--app") -> Pipeline:
    """The pipeline ``spec`` names; a one-line ConfigurationError naming ``option`` otherwise."""
    module_name, _, attr = spec.partition(":")
    attr = attr or "pipeline"
    if not module_name:
        raise ConfigurationError(
            f"{option} {spec!r}: expected MODULE:ATTR, e.g. examples/orders_pipeline.py:pipeline")
    try:
        if module_name.endswith(".py") or "/" in module_name:
            module = _load_file(Path(module_name), option, spec)
        else:
            if "" not in sys.path and str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))
            module = importlib.import_module(module_name)
    except ConfigurationError:
        raise
    except ModuleNotFoundError as exc:
        raise ConfigurationError(f"{option} {spec!r}: no module named {exc.name!r}") from None
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
        raise ConfigurationError(f"{option} {spec!r}: importing it failed: {why}") from None
    found = getattr(module, attr, None)
    if found is None:
        raise ConfigurationError(f"{option} {spec!r}: {module_name} has no attribute {attr!r}")
    if not isinstance(found, Pipeline):
        raise ConfigurationError(
            f"{option} {spec!r}: {attr} is a {type(found).__name__}, not a babelq.pipelines.consume.Pipeline")
    return found


def _load_file(path: Path, option: str, spec: str) -> object:
    if not path.is_file():
        raise ConfigurationError(f"{option} {spec!r}: no file {path}")
    name = path.stem if path.stem.isidentifier() else "babelq_app"
    loaded = importlib.util.spec_from_file_location(name, path)
    if loaded is None or loaded.loader is None:
        raise ConfigurationError(f"{option} {spec!r}: cannot load {path} as Python")
    module = importlib.util.module_from_spec(loaded)
    sys.modules[name] = module  # cloudpickle ships a module it finds here by value
    try:
        loaded.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module

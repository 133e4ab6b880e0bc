"""``MODULE:ATTR`` to the object it names: what ``babelq worker --app`` and ``babelq consume --app`` load.

MODULE is a dotted module, imported with the working directory on ``sys.path`` as ``python -m``
does, or a path to a ``.py`` file (it holds a ``/`` or ends in ``.py``); ATTR is a dotted
attribute path inside it (``app``, ``factories.make_app``). Every way a spec can name nothing
(malformed, no such module or file, the import raising or missing an optional dependency, no
such attribute) is a one-line :class:`~babelq.errors.ConfigurationError` that names the option
and the spec, because that is what the person typed and has to fix.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from babelq.errors import ConfigurationError
from babelq.extras import missing_extra


def load_object(spec: str, *, option: str, example: str, default_attr: str | None = None) -> object:
    """The object ``spec`` (``MODULE:ATTR``) names; ATTR may be left out when ``default_attr`` is given.

    ``example`` is a spec shown when ``spec`` is malformed.
    """
    module_part, _, attr = spec.partition(":")
    attr = attr or default_attr or ""
    if not module_part or not attr:
        raise ConfigurationError(
            f"{option} {spec!r}: expected MODULE:ATTR (a dotted module or a .py file), e.g. {example}"
        )
    target: object = import_module_part(module_part, option=option, spec=spec)
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigurationError(
                f"{option} {spec!r}: {module_part!r} has no attribute {attr!r}"
            ) from None
    return target


def import_module_part(module_part: str, *, option: str, spec: str) -> ModuleType:
    """The module of a spec, a dotted name or a ``.py`` path; failures name ``option`` and ``spec``."""
    is_file = module_part.endswith(".py") or "/" in module_part or os.sep in module_part
    try:
        if is_file:
            return _load_file(Path(module_part), option=option, spec=spec)
        if "" not in sys.path and str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))
        return importlib.import_module(module_part)
    except ConfigurationError:
        raise
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if not is_file and (missing == module_part or module_part.startswith(missing + ".")):
            raise ConfigurationError(
                f"{option} {spec!r}: no module named {missing!r} (run from the directory that holds "
                "it, or add that directory to PYTHONPATH)"
            ) from exc
        fix = missing_extra(exc) or "install what it needs"
        raise ConfigurationError(
            f"{option} {spec!r}: importing {module_part!r} failed: {exc}; {fix}"
        ) from exc
    except Exception as exc:
        raise ConfigurationError(
            f"{option} {spec!r}: importing {module_part!r} failed: {type(exc).__name__}: {exc}"
        ) from exc


def _load_file(path: Path, *, option: str, spec: str) -> ModuleType:
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

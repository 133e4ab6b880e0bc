"""Optional dependencies: which extra installs each, and importing one when it is needed.

babelq imports a client library (redis-py, psycopg, pyspark...) only when the feature that
uses it runs, so ``import babelq`` stays light. A missing one must then say, in one line, what
needed it and how to get it: :func:`optional_import` does that for every such import, and
:func:`missing_extra` turns an ``ImportError`` raised elsewhere into the same hint.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from babelq.errors import ConfigurationError

#: Top-level module of an optional dependency -> the extra that installs it.
EXTRAS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "pyspark": "spark", "pyarrow": "spark", "pandas": "spark",
        "redis": "redis",
        "boto3": "sqs", "botocore": "sqs",
        "psycopg": "postgres", "psycopg_binary": "postgres",
        "jsonschema": "schema",
        "confluent_kafka": "kafka",
        "pulsar": "pulsar",
        "proton": "artemis",
        "cryptography": "gdpr",
        "opentelemetry": "otel",
        "prometheus_client": "metrics",
    }
)  # fmt: skip


def install_hint(module: str, *, extra: str | None = None) -> str | None:
    """``needs the optional dependency 'module': pip install 'babelq[extra]'``, or None when no
    extra installs ``module`` (and none is given)."""
    extra = extra or EXTRAS.get(module.partition(".")[0])
    if extra is None:
        return None
    return f"needs the optional dependency {module!r}: pip install 'babelq[{extra}]'"


def missing_extra(exc: ImportError) -> str | None:
    """The install hint for an ImportError caused by a missing optional dependency, else None."""
    return install_hint(getattr(exc, "name", None) or "")


def optional_import(module: str, *, needed_for: str, extra: str | None = None) -> Any:
    """``module``, imported now; if that fails, a one-line ConfigurationError saying so.

    The line reads ``<needed_for> needs the optional dependency '<missing>': pip install
    'babelq[<extra>]'``, where ``<missing>`` is the module Python could not find (a client
    library's own dependency, or ``module``) and ``extra`` defaults to the one :data:`EXTRAS`
    names. The import error's text follows in brackets unless it only repeats that name (a
    broken installation says more than "No module named"). The module is typed ``Any``: the
    callers keep ``import x`` under ``TYPE_CHECKING`` when they want its types.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = exc.name or module
        hint = install_hint(missing, extra=extra) or install_hint(module, extra=extra)
        text = f"{needed_for} {hint}" if hint else f"{needed_for} needs the optional dependency {missing!r}"
        if str(exc) != f"No module named {missing!r}":
            text += f" ({exc})"
        raise ConfigurationError(text) from exc

"""The consumer's acceptance rules (SPEC section 2, "Consumer rules").

A message is accepted only if it has a URN (``job``, else the ``urn`` alias), ``meta`` is an
object with ``schema_version`` exactly 1, ``data`` is an object, ``attempts`` is an integer
(not a bool) and ``trace_id`` is a non-empty string. :func:`rejection` says which rule failed
so logs and dead letters can explain the verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from babelq.envelope.constants import SCHEMA_VERSION

_WS = " \t\n\r\x0b\x0c"


def urn_of(doc: Mapping[str, Any]) -> str:
    """The URN of a document: ``job`` if it is a non-blank string, else ``urn``, else ``""``."""
    job = doc.get("job")
    if type(job) is str and job.strip(_WS):
        return job
    alias = doc.get("urn")
    if type(alias) is str and alias.strip(_WS):
        return alias
    return ""


def rejection(doc: Mapping[str, Any]) -> str | None:
    """Why a consumer must reject ``doc``, or ``None`` when it is accepted."""
    if not urn_of(doc):
        return "no URN: neither 'job' nor 'urn' is a non-empty string"
    meta = doc.get("meta")
    if type(meta) is not dict:
        return "meta is missing or not an object"
    version = meta.get("schema_version")
    if type(version) is not int or version != SCHEMA_VERSION:
        return f"meta.schema_version is {version!r}; only {SCHEMA_VERSION} is supported"
    if type(doc.get("data")) is not dict:
        return "data is missing or not an object"
    attempts = doc.get("attempts")
    if type(attempts) is not int:
        return f"attempts is {type(attempts).__name__ if attempts is not None else 'missing'}, not an integer"
    trace_id = doc.get("trace_id")
    if type(trace_id) is not str or not trace_id.strip(_WS):
        return "trace_id is missing or not a non-empty string"
    return None


def accepts(doc: Mapping[str, Any]) -> bool:
    """Whether a consumer should accept ``doc`` (see :func:`rejection` for the reason).

    Same rules as :func:`rejection`, written for the consumer's hot path.
    """
    meta = doc.get("meta")
    if type(meta) is not dict:
        return False
    version = meta.get("schema_version")
    if version != SCHEMA_VERSION or type(version) is not int:
        return False
    if type(doc.get("data")) is not dict or type(doc.get("attempts")) is not int:
        return False
    trace_id = doc.get("trace_id")
    if type(trace_id) is not str or not trace_id.strip(_WS):
        return False
    job = doc.get("job")
    if type(job) is str and job.strip(_WS):
        return True
    alias = doc.get("urn")
    return type(alias) is str and bool(alias.strip(_WS))

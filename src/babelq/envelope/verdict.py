"""The consumer's acceptance rules (docs/standard.md §2.6).

A message is accepted only if it has a URN (``job``; the ``urn`` alias only when ``job`` is
absent or null: a ``job`` of another type, or blank, is no URN whatever ``urn`` says), ``meta`` is an
object with ``schema_version`` exactly 1, ``data`` is an object, ``attempts`` is an integer
(not a bool) and ``trace_id`` is a non-empty string. :func:`rejection` says which rule failed
so logs and dead letters can explain the verdict.

The members the standard types as 64-bit integers must fit one when present: ``attempts``,
``meta.created_at`` (null allowed) and, on a dead letter, ``dead_letter.failed_at`` and
``dead_letter.attempts`` (null allowed), with ``dead_letter`` itself an object or null. The
babelqueue package calls a body breaking one of those poison (a typed consumer cannot read
it); babelq rejects it too, so the two SDKs hand the same messages to handlers and a worker
never retries a message whose ``attempts`` it could not write back. "Blank" means ASCII
whitespace only, as in that package: a URN of U+00A0 is a URN.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from babelq.envelope.constants import ASCII_WHITESPACE, INT64_MAX, INT64_MIN, SCHEMA_VERSION

_WS = ASCII_WHITESPACE
_DEAD_LETTER_INTEGERS = ("failed_at", "attempts")


def urn_of(doc: Mapping[str, Any]) -> str:
    """The URN of a document: ``job`` when present, the ``urn`` alias only when ``job`` is absent
    (missing or null), ``""`` when the one that counts is not a non-blank string."""
    job = doc.get("job")
    if job is not None:
        return job if type(job) is str and job.strip(_WS) else ""
    alias = doc.get("urn")
    if type(alias) is str and alias.strip(_WS):
        return alias
    return ""


#: why a document whose ``job`` is present but unusable is rejected, whatever ``urn`` holds
JOB_NOT_A_URN: Final = (
    "no URN: 'job' is present but not a non-empty string ('urn' counts only when 'job' is absent)"
)
#: why a document without ``job`` and without a usable ``urn`` is rejected
NO_URN: Final = "no URN: neither 'job' nor 'urn' is a non-empty string"


def _int64_problem(name: str, value: Any) -> str | None:
    """Why ``value`` (present, not null) is not a signed 64-bit integer, or ``None``."""
    if type(value) is not int:
        return f"{name} is {type(value).__name__}, not an integer"
    if not INT64_MIN <= value <= INT64_MAX:
        return f"{name} is an integer outside signed 64-bit"
    return None


def _typed_members_problem(meta: dict[str, Any], block: Any) -> str | None:
    """The int64 rules on ``meta.created_at`` and the ``dead_letter`` block, in that order."""
    created_at = meta.get("created_at")
    if created_at is not None:
        problem = _int64_problem("meta.created_at", created_at)
        if problem is not None:
            return problem
    if block is None:
        return None
    if type(block) is not dict:
        return f"dead_letter is {type(block).__name__}, not an object"
    for key in _DEAD_LETTER_INTEGERS:
        value = block.get(key)
        if value is not None:
            problem = _int64_problem(f"dead_letter.{key}", value)
            if problem is not None:
                return problem
    return None


def rejection(doc: Mapping[str, Any]) -> str | None:
    """Why a consumer must reject ``doc``, or ``None`` when it is accepted."""
    if not urn_of(doc):
        return NO_URN if doc.get("job") is None else JOB_NOT_A_URN
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
    if not INT64_MIN <= attempts <= INT64_MAX:
        return "attempts is an integer outside signed 64-bit"
    trace_id = doc.get("trace_id")
    if type(trace_id) is not str or not trace_id.strip(_WS):
        return "trace_id is missing or not a non-empty string"
    return _typed_members_problem(meta, doc.get("dead_letter"))


def accepts(doc: Mapping[str, Any]) -> bool:
    """Whether a consumer should accept ``doc`` (see :func:`rejection` for the reason).

    Same rules as :func:`rejection`, written for the consumer's hot path: the int64 bounds are
    literals, and the optional members cost one lookup each when absent or well typed.
    """
    meta = doc.get("meta")
    if type(meta) is not dict:
        return False
    version = meta.get("schema_version")
    if version != SCHEMA_VERSION or type(version) is not int:
        return False
    attempts = doc.get("attempts")
    if (
        type(doc.get("data")) is not dict
        or type(attempts) is not int
        or not -0x8000000000000000 <= attempts <= 0x7FFFFFFFFFFFFFFF
    ):
        return False
    trace_id = doc.get("trace_id")
    if type(trace_id) is not str or not trace_id.strip(_WS):
        return False
    created_at = meta.get("created_at")
    if created_at is not None and (
        type(created_at) is not int or not -0x8000000000000000 <= created_at <= 0x7FFFFFFFFFFFFFFF
    ):
        return False
    block = doc.get("dead_letter")
    if block is not None and _typed_members_problem({}, block) is not None:
        return False
    job = doc.get("job")
    if job is not None:
        return type(job) is str and bool(job.strip(_WS))
    alias = doc.get("urn")
    return type(alias) is str and bool(alias.strip(_WS))

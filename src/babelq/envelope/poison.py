"""Poison records: dead-lettering bytes that are not a readable envelope (docs/standard.md §5).

The original bytes are preserved exactly, and the block's extra ``original`` key says how
(``in_place``, ``raw`` or ``raw_base64``). A body that is a well-formed JSON object keeps
every byte, with only a ``dead_letter`` member spliced in before its closing brace.
Anything else is wrapped as ``{"raw": <text>, "dead_letter": ...}``, or, when the bytes are
not valid UTF-8, ``{"raw": <base64>, "raw_encoding": "base64", "dead_letter": ...}``.
:func:`original_bytes` gives the exact original back from any of the three shapes.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from babelq.envelope import wire
from babelq.envelope.constants import INT64_MAX
from babelq.envelope.dead_letter import dead_letter_block
from babelq.errors import DecodeError

_WS = b" \t\n\r"


def poison_record(
    body: bytes | bytearray | memoryview | str,
    *,
    original_queue: str,
    error: str,
    attempts: int = 0,
    failed_at: int | None = None,
    cause: str | None = None,
    reason: str = "poison",
) -> bytes:
    """The dead-letter message for an unreadable or unsupported ``body``."""
    raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else bytes(body)
    spliced = wire.is_json_object(raw)
    text: str | None = None
    if not spliced:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    kept = "in_place" if spliced else ("raw" if text is not None else "raw_base64")
    block = dead_letter_block(
        reason, original_queue=original_queue, attempts=attempts, error=error,
        failed_at=failed_at, cause=cause, extra={"original": kept},
    )
    if spliced:
        block_bytes = wire.dumps_std(block)
        end = len(raw.rstrip(_WS)) - 1  # index of the closing brace
        empty = raw[:end].rstrip(_WS).endswith(b"{")
        sep = b"" if empty else b","
        return raw[:end] + sep + b'"dead_letter":' + block_bytes + raw[end:]
    if text is None:
        doc: dict[str, Any] = {
            "raw": base64.b64encode(raw).decode("ascii"),
            "raw_encoding": "base64",
            "dead_letter": block,
        }
    else:
        doc = {"raw": text, "dead_letter": block}
    return wire.dumps_std(doc)


def record_or_poison(
    build: Callable[[], bytes],
    body: bytes | bytearray | memoryview,
    *,
    original_queue: str,
    error: str | None,
    attempts: int = 0,
    cause: str | None = None,
) -> tuple[bytes, Exception | None]:
    """``(record, None)``: the annotated dead letter (or retry) ``build`` writes; when it cannot be
    written (an envelope decode accepted that will not re-encode, an attempts count beyond int64),
    ``(poison record of the original body, the exception)``.

    The one rule for every path that dead-letters a message it was given (the worker runtime, the
    Spark settle job): the dead-letter path never fails, so such a message reaches the DLQ with
    its bytes kept instead of coming back forever.
    """
    try:
        return build(), None
    except Exception as exc:
        why = f"the message cannot be re-encoded: {exc}"
        record = poison_record(
            body, original_queue=original_queue, error=f"{error}; {why}" if error else why,
            attempts=min(max(attempts, 0), INT64_MAX), cause=cause,
        )
        return record, exc


def original_bytes(record: bytes | bytearray | memoryview) -> bytes | None:
    """The exact original body kept inside a poison record, or ``None`` if it is not one."""
    try:
        data = wire.as_bytes(record)
        doc, _ = wire.loads_fast(data)
    except DecodeError:
        return None
    if type(doc.get("dead_letter")) is not dict:
        return None
    kept = doc["dead_letter"].get("original")
    if kept == "raw_base64" and type(doc.get("raw")) is str:
        try:
            return base64.b64decode(doc["raw"], validate=True)
        except ValueError:
            return None
    if kept == "raw" and type(doc.get("raw")) is str:
        return str(doc["raw"]).encode("utf-8")
    if kept != "in_place":
        return None
    member = b'"dead_letter":' + wire.dumps_std(doc["dead_letter"])
    at = data.rfind(member)
    if at < 0:
        return None
    before = data[:at]
    if before.endswith(b","):
        before = before[:-1]
    return before + data[at + len(member) :]

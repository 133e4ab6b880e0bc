"""Reading envelopes: :func:`decode` (docs/standard.md §2).

``decode`` is orjson plus a lazy :class:`~babelq.envelope.model.Envelope`; routing (``urn``,
``accepts()``) reads only the frame, so a consumer pays for nothing it does not use. A body
nested deeper than :data:`~babelq.envelope.constants.MAX_DEPTH` levels is poison, as ``make``
refuses to write one; a body shorter than :data:`~babelq.envelope.limits.SHALLOW_JSON_BYTES`
cannot be that deep, so the usual message pays one length comparison for the check.
"""

from __future__ import annotations

import orjson

from babelq.envelope import wire
from babelq.envelope.limits import SHALLOW_JSON_BYTES
from babelq.envelope.model import Envelope

_orjson_loads = orjson.loads


def decode(body: bytes | bytearray | memoryview | str) -> Envelope:
    """Read an envelope from wire bytes (or text).

    Raises :class:`~babelq.errors.DecodeError` (and nothing else) when the body is not valid
    UTF-8, not JSON (including NaN/Infinity and numbers beyond a double, integers too), nested deeper than
    :data:`~babelq.envelope.constants.MAX_DEPTH` levels, or not a JSON object: such a body is
    poison. A body that is an object but breaks the consumer rules decodes fine; check
    :meth:`Envelope.accepts`.
    """
    raw = body if body.__class__ is bytes else wire.as_bytes(body)
    try:
        doc = _orjson_loads(raw)
    except orjson.JSONDecodeError:
        doc, exact = wire.loads_fast(raw)  # the standard library's second look, or DecodeError
        return Envelope._decoded(doc, raw, exact)
    if len(raw) > SHALLOW_JSON_BYTES:  # could be nested too deeply (raises DecodeError if so)
        dumped = wire.depth_checked_dump(raw, doc)
        if doc.__class__ is not dict:
            raise wire.not_object(doc)
        return Envelope._decoded(doc, raw, False, dumped)
    if doc.__class__ is not dict:
        raise wire.not_object(doc)
    return Envelope._decoded(doc, raw, False)

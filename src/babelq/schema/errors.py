"""The error of data that breaks its URN's schema."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from babelq.errors import BabelqError
from babelq.runtime.rules import schema_error

#: How many of a message's errors its text lists (the rest are counted).
SHOWN_ERRORS: Final = 3


class SchemaViolationError(BabelqError, ValueError):
    """``data`` breaks the JSON Schema registered for ``urn``.

    ``errors`` are all the ``"<JSON path>: <message>"`` texts; the exception's own text is one
    line, ``schema: <the first few>`` (prefixed by ``refused``, e.g. ``refused to publish <urn> to
    'orders'``, on the publish side). It becomes ``dead_letter.error`` on the consume side, and
    ``dead_letter.exception`` is ``SchemaViolationError``.
    """

    def __init__(self, urn: str, errors: Sequence[str], *, refused: str = "") -> None:
        self.urn = urn
        self.errors = list(errors)
        shown = "; ".join(self.errors[:SHOWN_ERRORS])
        if len(self.errors) > SHOWN_ERRORS:
            shown += f" (and {len(self.errors) - SHOWN_ERRORS} more)"
        text = schema_error(shown)
        super().__init__(f"{refused}: {text}" if refused else text)

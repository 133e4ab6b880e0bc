"""Name-based message ids as a Spark column: the same UUID for the same name, on every run.

A producer that may run twice over the same input (a bulk file ingested again after a crash)
needs each message's ``meta.id`` to be a function of the input, not a fresh random UUID, or
the consumer's deduplication on ``meta.id`` cannot see that the second copy is the first one.
:func:`name_uuid` is RFC 4122 version 5 (SHA-1 over the namespace's 16 bytes and the name's
UTF-8 bytes) written in Spark SQL, so it runs on the JVM per row and equals Python's
``str(uuid.uuid5(namespace, name))`` byte for byte (tested).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column


def name_uuid(namespace: uuid.UUID, name: Column) -> Column:
    """``uuid.uuid5(namespace, name)`` as a lowercase hyphenated string column (null for a null name)."""
    from pyspark.sql import functions as sf

    # a string cast to binary is its UTF-8 bytes (encode(name, "UTF-8") looks the charset up per row)
    digest = sf.sha1(sf.concat(sf.unhex(sf.lit(namespace.hex)), name.cast("binary")))

    def part(start: int, length: int) -> Column:  # 1-based, as Spark's substring
        return sf.substring(digest, start, length)

    # digit 13 becomes the version (5); digit 17 keeps its two low bits under the variant 10xx:
    # (d & 3) | 8 for a lowercase hex digit d, as a character map (sha1 gives lowercase hex). A
    # map, not conv()/hex() arithmetic: those parse and print strings per row, a cost the
    # whole encode of ingest would feel
    variant = sf.translate(part(17, 1), "0123456789abcdef", "89ab89ab89ab89ab")
    dash = sf.lit("-")
    text = sf.concat(
        part(1, 8), dash, part(9, 4), dash, sf.lit("5"), part(14, 3), dash, variant, part(18, 3), dash,
        part(21, 12),
    )
    # null in, null out without a CASE: concat and sha1 pass nulls through, and the digest's seven
    # uses stay outside any conditional branch, where subexpression elimination computes it once
    return text

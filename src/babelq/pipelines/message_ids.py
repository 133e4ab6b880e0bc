"""A produced message's ``meta.id``: the same for the same row of the same batch, on every run.

``meta.id`` is what a consumer deduplicates on, so a producer that can run twice over the same
input (a bulk file published again after a crash) must not mint a fresh random id each time.
A row's id is a name-based UUID (version 5) in the namespace of its URN of the name
``<batch id>\\n<key>``, the key being what tells the rows of a batch apart (a payment's
reference, the value of ``babelq publish --id-column``, a row's position). It is computed per
row on the JVM by :func:`message_id_column` and in Python by :func:`message_id` (equal, tested).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

#: Separates the batch id from the key in the name (a character no batch id holds).
NAME_SEPARATOR = "\n"


def id_namespace(urn: str) -> uuid.UUID:
    """The namespace of the ids of ``urn``'s messages: two URNs never share an id."""
    return uuid.uuid5(uuid.NAMESPACE_URL, urn)


def message_id(urn: str, batch_id: str, key: str) -> str:
    """The ``meta.id`` of the row ``key`` of a batch of ``urn`` messages."""
    return str(uuid.uuid5(id_namespace(urn), f"{batch_id}{NAME_SEPARATOR}{key}"))


def message_id_column(urn: str, batch_id: str, key: Column) -> Column:
    """:func:`message_id` of every row, as a Spark column (null where ``key`` is null)."""
    from pyspark.sql import functions as sf

    from babelq.spark.ids import name_uuid

    return name_uuid(id_namespace(urn), sf.concat(sf.lit(batch_id + NAME_SEPARATOR), key.cast("string")))

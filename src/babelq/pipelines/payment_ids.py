"""A payment's ``meta.id``: the same for the same row of the same batch, on every run.

``meta.id`` is what the consumer deduplicates on, so a producer that can run twice over the
same input (ingest re-run after a crash) must not mint a fresh random id each time. A payment's
id is a name-based UUID (version 5) of its batch id and its payment reference, computed per row
on the JVM by :func:`payment_id_column` and in Python by :func:`payment_id` (equal, tested).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from babelq.pipelines import TRANSFER_URN

if TYPE_CHECKING:
    from pyspark.sql import Column

#: The namespace of payment ids: every ``transfer.requested`` id is uuid5(this, batch + reference).
PAYMENT_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, TRANSFER_URN)
#: Separates the batch id from the reference in the name (a character no batch id holds).
NAME_SEPARATOR = "\n"


def payment_id(batch_id: str, payment_reference: str) -> str:
    """The ``meta.id`` of a payment of a bulk batch."""
    return str(uuid.uuid5(PAYMENT_ID_NAMESPACE, f"{batch_id}{NAME_SEPARATOR}{payment_reference}"))


def payment_id_column(batch_id: str, reference: Column) -> Column:
    """:func:`payment_id` of every row, as a Spark column."""
    from pyspark.sql import functions as sf

    from babelq.spark.ids import name_uuid

    return name_uuid(PAYMENT_ID_NAMESPACE, sf.concat(sf.lit(batch_id + NAME_SEPARATOR), reference))

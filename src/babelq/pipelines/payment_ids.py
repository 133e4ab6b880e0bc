"""A payment's ``meta.id``: :mod:`~babelq.pipelines.message_ids`' rule for ``transfer.requested``,
keyed by the payment reference.

``meta.id`` is what settle deduplicates on, so an ingest re-run after a crash must publish the
same ids: a payment's id is a name-based UUID (version 5) of its batch id and its payment
reference, computed per row on the JVM by :func:`payment_id_column` and in Python by
:func:`payment_id` (equal, tested).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from babelq.pipelines import TRANSFER_URN
from babelq.pipelines.message_ids import NAME_SEPARATOR, id_namespace, message_id, message_id_column

if TYPE_CHECKING:
    from pyspark.sql import Column

#: The namespace of payment ids: every ``transfer.requested`` id is uuid5(this, batch + reference).
PAYMENT_ID_NAMESPACE = id_namespace(TRANSFER_URN)

__all__ = ["NAME_SEPARATOR", "PAYMENT_ID_NAMESPACE", "payment_id", "payment_id_column"]


def payment_id(batch_id: str, payment_reference: str) -> str:
    """The ``meta.id`` of a payment of a bulk batch."""
    return message_id(TRANSFER_URN, batch_id, payment_reference)


def payment_id_column(batch_id: str, reference: Column) -> Column:
    """:func:`payment_id` of every row, as a Spark column."""
    return message_id_column(TRANSFER_URN, batch_id, reference)

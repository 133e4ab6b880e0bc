"""The payment pipelines on Spark: ingest a bulk file, settle it exactly once, triage the DLQ.

``ingest`` validates a bulk payments file in Spark SQL and publishes one
``urn:babel:payments:transfer.requested`` envelope per valid row; ``settle``
consumes them as a stream and posts each payment to a ledger exactly once, whatever the
broker redelivers; ``dlq`` explains and redrives what could not be settled; ``demo`` runs
it all end to end and reconciles. Modules import pyspark only when a Spark function runs.
"""

from __future__ import annotations

TRANSFER_URN = "urn:babel:payments:transfer.requested"

__all__ = ["TRANSFER_URN"]

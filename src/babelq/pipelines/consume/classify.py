"""A consume run's view of a micro-batch, on the JVM: decoded and classified by the consume rules.

Everything here is Spark SQL expressions (no Python runs per row):

1. :func:`decoded` reads every body with :func:`babelq.spark.decode.decode` (babelq's JVM scanner)
   and keeps what the partitions need: the typed fields, ``data`` as JSON text, the verdict. A run
   applies it once, to the streaming DataFrame, not to every micro-batch: building decode's
   expressions costs many Python and Py4J calls, and the same expressions on every
   batch let Spark reuse the code it generated for them.
2. :func:`classified` gives every row the first rule of :data:`babelq.runtime.rules.ORDER` that
   applies (``rule``: ``poison``, ``unsupported``, ``expired``, ``deferred``, ``unknown_urn``, or
   null when the message goes on to the handler) and what a failure of its handler run will lead
   to (``on_failure``: ``retry`` or ``max_attempts``, by the shared
   :class:`~babelq.runtime.rules.RetryPolicy`). The rows stay in the partition that read them:
   each read slot's task decodes, classifies and handles its own share
   (:mod:`babelq.pipelines.consume.partition`), all slots at once, and no body crosses a shuffle.

The rules are the runtime's (:mod:`babelq.runtime.rules`): the ``CASE WHEN`` is built from
:data:`~babelq.runtime.rules.ORDER`, one branch per rule, and refuses to build when a rule has no
expression here. Poison and unsupported come from decode's verdict: a body decode rejects with a
reason starting ``body `` is not an envelope at all (the core codec's
:class:`~babelq.errors.DecodeError` texts: not UTF-8, not JSON, not usable JSON, not an object),
any other rejection is the consumer rules' (``unsupported``).

Copies. Two rows are copies when they have the same non-empty ``meta.id``, the same body
``attempts`` and the same verdict (both accepted or both rejected). A message and the retry of it
an earlier run published are two attempts, not copies, and must both be settled; an id-less body
is never taken for a copy. The partition marks the copies it holds itself, in read order
(:func:`babelq.pipelines.consume.partition.consume_partition`). Copies that two slots read are
handled by both and the sink keeps one, inside each partition's transaction: a processed id is
claimed once, an outbox key (id and attempts) once. A shuffle by ``meta.id`` would bring the
copies together, but it would move every body of the micro-batch a second time to catch the rare
copy: a visible share of settle's time on a small machine, and on a cluster every body over the
network.

Code generation. The rules compare with ``now``: each row's ``reserved_at``, a value in the data,
so that every micro-batch runs the same generated code (:class:`Classifier`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from babelq.runtime import rules

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: decode's reasons for bodies that are not envelopes all start with this (the core codec's texts)
POISON_REASON_PREFIX = "body "

#: The columns :func:`classified` hands to the Python part, in this order.
CLASSIFIED = (
    "body", "rule", "id", "urn", "body_attempts", "attempts", "on_failure", "delay_ms", "reject_reason",
    "data_json", "trace_id", "correlation_id", "read_by", "now", "stored_at",
)

_NOW = "__bq_now"


def decoded(batch: DataFrame) -> DataFrame:
    """``batch`` (``body``, optional ``broker_attempts``) decoded on the JVM, trimmed to what a
    partition reads. ``attempts`` is the binding's reconciliation, ``max(body attempts, broker_attempts)``
    (docs/standard.md §4: an SQS message received three times is at attempt 2 whatever its body says);
    ``body_attempts`` is the body's own count, which names the attempt in the outbox key;
    ``read_by`` is the source's (which process took the row from the broker), null without it;
    ``stored_at`` the broker's time of storing the message (ms), null where the broker has none;
    ``reserved_at`` too (when the broker handed the row over, ms; where the column or its value is
    missing, the time of this call), the ``now`` the consume rules judge a row by (:class:`Classifier`)."""
    from pyspark.sql import functions as sf

    from babelq.spark.decode import decode

    floor = sf.coalesce(sf.col("broker_attempts").cast("long"), sf.lit(0).cast("long")) \
        if "broker_attempts" in batch.columns else sf.lit(0).cast("long")
    reader = sf.col("read_by") if "read_by" in batch.columns else sf.lit(None).cast("string")
    # rows from elsewhere than the source (a batch DataFrame) may have no time: handed over now.
    # On a stream this literal is fixed when the stream is built, so it does not change the code.
    from babelq.envelope import now_ms

    handed_over = sf.lit(now_ms()).cast("long")
    reserved = sf.coalesce(sf.col("reserved_at").cast("long"), handed_over) \
        if "reserved_at" in batch.columns else handed_over
    stored = sf.col("stored_at").cast("long") if "stored_at" in batch.columns else sf.lit(None).cast("long")
    refusal = sf.col("refusal") if "refusal" in batch.columns else sf.lit(None).cast("string")
    out = decode(batch.select("body", floor.alias("broker_attempts"), reader.alias("read_by"),
                              reserved.alias("reserved_at"), stored.alias("stored_at"),
                              refusal.alias("refusal")), "body")
    # a row the broker's schema-version property refused is judged by that alone (rule
    # "unsupported", its reason the refusal), whatever its body would have said
    refused = sf.col("refusal").isNotNull()
    return out.select(
        "body",
        "urn",
        "id",
        sf.col("attempts").alias("body_attempts"),
        sf.greatest(sf.col("attempts"), sf.col("broker_attempts")).alias("attempts"),
        "trace_id",
        sf.col("extensions.correlation_id").alias("correlation_id"),
        sf.col("extensions.expire_at").alias("expire_at"),
        sf.col("extensions.deliver_at").alias("deliver_at"),
        "data_json",
        (sf.col("accepted") & ~refused).alias("accepted"),
        sf.when(refused, sf.col("refusal")).otherwise(sf.col("reject_reason")).alias("reject_reason"),
        "read_by",
        "reserved_at",
        "stored_at",
    )


def rule_tests(now: Column, urns: Sequence[str]) -> dict[str, Column]:
    """Each rule of :data:`~babelq.runtime.rules.ORDER` as a condition on a :func:`decoded` row
    (each is asked only of rows no earlier rule took); ``now`` is the time the row is judged at (ms)."""
    from pyspark.sql import functions as sf

    expire_at, deliver_at = sf.col("expire_at"), sf.col("deliver_at")
    return {
        rules.POISON: ~sf.col("accepted") & sf.col("reject_reason").startswith(POISON_REASON_PREFIX),
        rules.UNSUPPORTED: ~sf.col("accepted"),
        # rules.is_expired: now >= expire_at
        rules.EXPIRED: sf.coalesce(now >= expire_at, sf.lit(False)),
        # rules.deferred_ms > 0: deliver_at > now
        rules.DEFERRED: sf.coalesce(deliver_at > now, sf.lit(False)),
        rules.UNKNOWN_URN: ~sf.col("urn").isin(*urns),
    }


def rule_column(now: Column, urns: Sequence[str]) -> Column:
    """The first rule that applies to the row, in the shared order; null when none does."""
    from pyspark.sql import functions as sf

    tests = rule_tests(now, urns)
    rules.check_implemented("consume's Spark classification", tests)
    first, *rest = rules.ORDER
    column = sf.when(tests[first.name], sf.lit(first.name))
    for rule in rest:
        column = column.when(tests[rule.name], sf.lit(rule.name))
    return column


class Classifier:
    """:func:`classified` with its columns built once, for a query that classifies every micro-batch.

    Building the ``CASE WHEN`` and the retry decision costs a few hundred Py4J calls, too much
    driver time to pay on every micro-batch of a streaming run.

    ``now``: a streamed micro-batch is judged by each row's ``reserved_at`` (when the broker
    handed it over), a value in the data, so every micro-batch runs the same plan and the same
    generated code. A literal ``now`` would differ on every batch, and Spark inlines a long
    literal into the Java it generates: every micro-batch would compile decode's and the rules'
    code anew and run it cold. A caller that passes ``now_ms`` (a batch DataFrame, a test) gets
    that literal."""

    def __init__(self, *, urns: Sequence[str], policy: rules.RetryPolicy) -> None:
        from pyspark.sql import functions as sf

        now = sf.col(_NOW)
        # compared, not added to: attempts + 1 could overflow a long (Spark's ANSI mode raises)
        retried = sf.greatest(sf.col("attempts"), sf.lit(0)) <= sf.lit(policy.last_retried_attempts)
        delay = sf.when(
            sf.col("deliver_at") > now,
            sf.least(sf.col("deliver_at") - now, sf.lit(rules.MAX_DELAY_MS)),
        )
        self._columns: list[Column | str] = [
            "body",
            rule_column(now, urns).alias("rule"),
            "id",
            "urn",  # which handler: a consume pipeline's batch handlers group by it without a decode
            "body_attempts",
            "attempts",
            sf.when(retried, sf.lit("retry")).otherwise(sf.lit(rules.MAX_ATTEMPTS)).alias("on_failure"),
            delay.cast("long").alias("delay_ms"),
            "reject_reason",
            "data_json",
            "trace_id",
            "correlation_id",
            "read_by",
            now.alias("now"),
            "stored_at",
        ]

    def __call__(self, rows: DataFrame, now_ms: int | None = None) -> DataFrame:
        """The :func:`decoded` ``rows`` as the Python part reads them (:data:`CLASSIFIED`), in
        the partitions that read them, judged at ``now_ms`` (None: at each row's ``reserved_at``)."""
        from pyspark.sql import functions as sf

        now = sf.col("reserved_at") if now_ms is None else sf.lit(now_ms).cast("long")
        return rows.withColumn(_NOW, now).select(*self._columns)


def classified(
    rows: DataFrame, *, now_ms: int | None, urns: Sequence[str], policy: rules.RetryPolicy
) -> DataFrame:
    """The :func:`decoded` ``rows`` as the Python part reads them (:data:`CLASSIFIED`), in
    the partitions that read them (:class:`Classifier`, built for one call)."""
    return Classifier(urns=urns, policy=policy)(rows, now_ms)

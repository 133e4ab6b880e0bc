"""Your own pipeline on Spark: handlers per URN, run over a queue into your database exactly once.

>>> from babelq.pipelines.consume import Pipeline, marks
>>> pipeline = Pipeline(queue="orders")
>>> @pipeline.handler("urn:babel:orders:created")
... def created(message, tx):
...     tx.execute(f"INSERT INTO orders VALUES ({marks(tx, 2)})", (message.data["order_id"], message.id))

or, the fast path, a partition's messages of a URN at once, as an Arrow batch:

>>> @pipeline.batch_handler("urn:babel:orders:paid")
... def paid(batch, tx):
...     ids = batch.column("meta_id").to_pylist()  # returns None: every row done
...     tx.executemany(f"INSERT INTO paid VALUES ({marks(tx, 1)})", [(i,) for i in ids])

Run it with ``babelq consume --app module:pipeline --broker URL --sink URL --checkpoint DIR`` or
:func:`consume`. One job per module:

* :mod:`~babelq.pipelines.consume.api`: :class:`Pipeline`, :class:`Message`, :func:`marks`, a batch
  handler's :class:`Verdict` per row (:data:`DONE`, :func:`duplicate`, :func:`retry`, :func:`dead_letter`,
  :func:`unavailable`);
* :mod:`~babelq.pipelines.consume.sink`: the sink database, babelq's processed ids and outbox in it;
* :mod:`~babelq.pipelines.consume.files`: a files sink (``parquet:///dir``): rows appended to
  tables of files, the processed ids and outbox in a state database beside them;
* :mod:`~babelq.pipelines.consume.partition`: one partition of a micro-batch, one sink transaction;
* :mod:`~babelq.pipelines.consume.query`: the streaming query (:func:`consume`);
* :mod:`~babelq.pipelines.consume.loader`: ``MODULE:ATTR`` to a pipeline (the command's ``--app``).

Importing this package imports neither pyspark nor a database driver.
"""

from babelq.pipelines.consume.api import (
    BATCH_COLUMNS,
    DONE,
    Message,
    Pipeline,
    Verdict,
    dead_letter,
    duplicate,
    marks,
    retry,
    unavailable,
)
from babelq.pipelines.consume.loader import load_pipeline
from babelq.pipelines.consume.query import ConsumeRun, ConsumeStats, consume, prepare_consume

__all__ = ["BATCH_COLUMNS", "DONE", "ConsumeRun", "ConsumeStats", "Message", "Pipeline", "Verdict", "consume",
           "dead_letter", "duplicate", "load_pipeline", "marks", "prepare_consume", "retry", "unavailable"]

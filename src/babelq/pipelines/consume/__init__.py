"""Your own pipeline on Spark: handlers per URN, run over a queue into your database exactly once.

>>> from babelq.pipelines.consume import Pipeline, marks
>>> pipeline = Pipeline(queue="orders")
>>> @pipeline.handler("urn:babel:orders:created")
... def created(message, tx):
...     tx.execute(f"INSERT INTO orders VALUES ({marks(tx, 2)})", (message.data["order_id"], message.id))

Run it with ``babelq consume --app module:pipeline --broker URL --sink URL --checkpoint DIR`` or
:func:`consume`. One job per module:

* :mod:`~babelq.pipelines.consume.api`: :class:`Pipeline`, :class:`Message`, :func:`marks`;
* :mod:`~babelq.pipelines.consume.sink`: the sink database, babelq's processed ids and outbox in it;
* :mod:`~babelq.pipelines.consume.partition`: one partition of a micro-batch, one sink transaction;
* :mod:`~babelq.pipelines.consume.query`: the streaming query (:func:`consume`);
* :mod:`~babelq.pipelines.consume.loader`: ``MODULE:ATTR`` to a pipeline (the command's ``--app``).

Importing this package imports neither pyspark nor a database driver.
"""

from babelq.pipelines.consume.api import Message, Pipeline, marks
from babelq.pipelines.consume.loader import load_pipeline
from babelq.pipelines.consume.query import ConsumeRun, ConsumeStats, consume, prepare_consume

__all__ = ["ConsumeRun", "ConsumeStats", "Message", "Pipeline", "consume", "load_pipeline", "marks",
           "prepare_consume"]

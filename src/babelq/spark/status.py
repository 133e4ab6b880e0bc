"""How far a running Spark SQL job is, in rows, read from Spark's own SQL metrics (driver side).

PySpark's public status API (``SparkContext.statusTracker()``) knows jobs and stages: task
counts, no rows. A stage of babelq's pipelines is one task per input split (one task for a 100k
row CSV file), so its task counts sit at 0 of 1 for the whole stage. The rows are in Spark's SQL
metrics: every plan node's "number of output rows" is an accumulator that the executors report
with each heartbeat while a task runs and again when it ends; the SQL status store (what the
Spark UI's SQL tab shows, kept whether the UI runs or not) sums them per execution. This module
reads that store through Py4J: PySpark 4.3 exposes it nowhere in Python.

Which node counts "the rows of this job": the one closest to the plan's root that counts rows,
passing over aggregates (they count groups) and write commands (they report their count once,
at the end). For babelq's jobs that is

* validation (``ingest.validate``: the validated rows cached, then counted by reason): the scan
  of the cache being built, i.e. rows that went through every rule;
* a write (``ingest.rejects``, ``ingest.publish``): the filter feeding the writer, i.e. rows handed
  to the writer tasks. The ``babelq`` writer publishes them in batches as it receives them, so
  this runs ahead of the broker by at most the batch each running task holds.

The file scans' own counts (``Scan csv``, ``Scan parquet``) are read too: validation reads the
whole file (and shuffles it to find duplicate references) before the first row reaches the
cache, so "rows read" is what moves during the first part of ``ingest.validate``.

Granularity: a live value moves with the executor heartbeat (``spark.executor.heartbeatInterval``,
10 s by default; babelq's CLI sets 2 s when it shows progress) and with each task's end; a scan of
cached data counts a whole cached batch (10,000 rows) at a time.

When no node counts rows (an RDD job, a plan this does not recognise), :class:`JobRows` says so
and counts finished tasks of the running stages instead, in the unit ``tasks``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

#: the SQL metric of a plan node that counts the rows it produced
OUTPUT_ROWS = "number of output rows"
#: plan nodes whose row count is not the job's rows: aggregates count groups; write commands
#: count once, when they finish
_NOT_ROWS = ("Aggregate", "AppendData", "OverwriteByExpression", "OverwritePartitionsDynamic",
             "Execute ", "WriteFiles", "InsertInto", "CreateTable", "ReplaceTable")


@dataclass(frozen=True, slots=True)
class Reading:
    """How far the job is: ``done`` of ``total`` (None: the caller knows it, or nobody does) ``unit``;
    ``read``: rows its file scans produced so far (None: it reads no file)."""

    done: int
    unit: str
    total: int | None = None
    read: int | None = None


@dataclass(frozen=True, slots=True)
class _Metrics:
    """The accumulators :class:`JobRows` reads for one plan of one execution."""

    execution: int
    seen: int  #: how many metrics the execution had when the plan was looked at
    rows: int | None  #: the node counting the job's rows
    scans: tuple[int, ...]  #: the file scans' output rows


def _count(text: str) -> int:
    """A sum metric's display value (``98,203``) as an integer."""
    digits = "".join(c for c in text.split("(", 1)[0] if c.isdigit())
    return int(digits) if digits else 0


def _seq(values: Any) -> list[Any]:
    """A Scala ``Seq`` from Py4J as a Python list."""
    return [values.apply(i) for i in range(values.size())]


class JobRows:
    """Rows through the SQL executions this session starts after the object is made.

    Make one when a stage starts and call :meth:`read` while it runs (from any thread). Only
    executions begun after :meth:`__init__` count, so an earlier stage's work is never mistaken
    for this one's; when several run, the latest does.
    """

    def __init__(self, spark: Any) -> None:
        self._sc = spark.sparkContext
        self._store = spark._jsparkSession.sharedState().statusStore()
        self._next = self._last_execution() + 1
        self._current: int | None = None
        self._metrics: _Metrics | None = None

    def _last_execution(self) -> int:
        count = int(self._store.executionsCount())
        if count == 0:
            return -1
        last = _seq(self._store.executionsList(count - 1, 1))
        return int(last[0].executionId()) if last else -1

    def _latest(self) -> Any:
        """The newest execution begun after the mark (following new ones as they appear), or None."""
        while True:
            found = self._store.execution(self._next)
            if found.isEmpty():
                break
            self._current = self._next
            self._next += 1
        if self._current is None:
            return None
        found = self._store.execution(self._current)
        return None if found.isEmpty() else found.get()

    def _plan_metrics(self, execution: Any) -> _Metrics:
        """The accumulators to read for this execution (see the module docstring); looked up again
        only when adaptive execution changed the plan (its metric list grows)."""
        eid = int(execution.executionId())
        seen = int(execution.metrics().size())
        if self._metrics is not None and (self._metrics.execution, self._metrics.seen) == (eid, seen):
            return self._metrics
        graph = self._store.planGraph(eid)
        nodes = {int(n.id()): n for n in _seq(graph.allNodes())}
        children: dict[int, list[int]] = {}
        below: set[int] = set()
        for edge in _seq(graph.edges()):  # from the child to its parent
            children.setdefault(int(edge.toId()), []).append(int(edge.fromId()))
            below.add(int(edge.fromId()))
        rows: int | None = None
        scans: list[int] = []
        level, visited = sorted(i for i in nodes if i not in below), set()  # from the roots down
        while level:
            following: list[int] = []
            for node_id in level:
                if node_id in visited or node_id not in nodes:
                    continue
                visited.add(node_id)
                name = str(nodes[node_id].name())
                counted = [int(m.accumulatorId()) for m in _seq(nodes[node_id].metrics())
                           if str(m.name()) == OUTPUT_ROWS]
                if counted and rows is None and not any(word in name for word in _NOT_ROWS):
                    rows = counted[0]
                if counted and name.startswith("Scan ") and "ExistingRDD" not in name:
                    scans.append(counted[0])
                following += children.get(node_id, [])
            level = sorted(following)
        self._metrics = _Metrics(eid, seen, rows, tuple(scans))
        return self._metrics

    def _tasks(self) -> Reading:
        tracker = self._sc.statusTracker()
        done = total = 0
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                done += info.numCompletedTasks
                total += info.numTasks
        return Reading(done, "tasks", total)

    def read(self) -> Reading:
        """Rows so far (unit ``rows``), or finished tasks of the running stages (unit ``tasks``)
        when the running execution has no row count this recognises. Rows are 0 before the first
        execution starts."""
        execution = self._latest()
        if execution is None:
            return Reading(0, "rows")
        plan = self._plan_metrics(execution)
        if plan.rows is None:
            return self._tasks()
        values = self._store.executionMetrics(execution.executionId())

        def value(accumulator: int) -> int:
            found = values.get(accumulator)
            return 0 if found.isEmpty() else _count(str(found.get()))

        read = sum(value(a) for a in plan.scans) if plan.scans else None
        return Reading(value(plan.rows), "rows", read=read)

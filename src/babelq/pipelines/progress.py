"""Live progress of the pipelines' long stages: how many of how many, how fast, how long still.

One :class:`Progress` per command run; each stage gets a :class:`Task` (``ingest.validate``,
``ingest.publish``, ``settle``...) that is told its count as the work goes. How it is shown is the
:class:`Progress`'s business:

* :meth:`Progress.bars`: a ``rich`` display on a terminal (a bar per stage, the count of the
  total, the rate and the time left), drawn on stderr; log lines printed meanwhile appear above it;
* :meth:`Progress.lines`: when stderr is not a terminal (a CI log, a file), a plain log line per
  stage every few seconds, ``stage ingest.publish: 40,000 / 98,203 rows (41%), 12,300 rows/s,
  ETA 5 s``, and one when the stage ends (logger ``babelq.pipelines.progress``, INFO);
* :meth:`Progress.off` (what the library uses unless told otherwise): nothing.

:meth:`Progress.auto` picks between the first two, as the CLI does by default.

Where the counts come from is the callers' (and this module's helpers') business, and each is
what it says: the Spark stages of ingest read Spark's own SQL metrics while the job runs
(:func:`watch_spark`, :mod:`babelq.spark.status`: rows, or tasks when a job has no row count);
settle counts the messages its micro-batches finished and asks the broker how many are reserved
(:class:`SettleProgress`). ``rich`` is imported only when bars are drawn.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

from babelq.pipelines.csv_layout import csv_layout

if TYPE_CHECKING:
    from babelq.pipelines.settle import SettleRun, SettleStats
    from babelq.transports.base import Transport

log = logging.getLogger(__name__)

#: seconds between two plain lines of one stage
LINE_EVERY: Final = 5.0
#: a stage whose numbers do not move still gets a plain line every this many intervals
QUIET_LINES: Final = 6
#: the rate is measured over the last this many seconds (so a slow start does not weigh forever)
RATE_WINDOW: Final = 10.0
#: seconds between two looks at Spark's metrics while a Spark stage runs
SPARK_POLL: Final = 1.0
#: Spark settings under which its metrics move while a task runs: executors report their
#: accumulators with each heartbeat, every 10 s by default. Executor settings count only before
#: the context exists, so a command adds these when it starts Spark with progress shown.
SPARK_CONF: Final = {"spark.executor.heartbeatInterval": "2s"}
#: the choices of the CLI's ``--progress``
CHOICES: Final = ("auto", "bars", "lines", "none")


def _seconds(value: float) -> str:
    """``42 s``, ``3 min 5 s``, ``1 h 2 min``."""
    value = max(0, round(value))
    if value < 60:
        return f"{value} s"
    if value < 3600:
        return f"{value // 60} min {value % 60} s"
    return f"{value // 3600} h {value % 3600 // 60} min"


class Task:
    """One stage's progress: ``done`` of ``total`` (None while unknown) ``unit``, since when, how fast.

    :meth:`update` may be called from any thread, as often as the caller likes: the display
    decides how often it shows anything. ``note`` is extra text shown after the numbers
    (``98,303 reserved (being settled)``).
    """

    def __init__(self, progress: Progress, name: str, total: int | None, unit: str) -> None:
        self.progress = progress
        self.name = name
        self.total = total
        self.unit = unit
        self.done = 0
        self.note = ""
        self.started = time.monotonic()
        self.ended: float | None = None
        self.complete = False
        self.lock = threading.Lock()
        self._samples: deque[tuple[float, int]] = deque([(self.started, 0)])

    def update(self, done: int, *, total: int | None = -1, unit: str | None = None,
               note: str | None = None) -> None:
        """Set the count (and, when given, the total (``-1``: keep it), the unit and the note)."""
        with self.lock:
            if self.finished:
                return
            if unit is not None and unit != self.unit:  # another measure: its own rate
                self._samples = deque([(time.monotonic(), done)])
                self.unit = unit
            self.done = max(0, done)
            if total != -1:
                self.total = total
            if note is not None:
                self.note = note
            now = time.monotonic()
            self._samples.append((now, self.done))
            while len(self._samples) > 2 and self._samples[1][0] < now - RATE_WINDOW:
                self._samples.popleft()  # keeps one sample older than the window
        self.progress.display.changed(self)

    def finish(self, done: int | None = None, *, complete: bool = True, unit: str | None = None,
               note: str | None = None) -> None:
        """The stage ended with ``done`` ``unit`` (default: the last count, in the last unit).
        ``complete``: ``done`` is the whole of it (the total becomes ``done``); otherwise the total
        stays (a run that stopped early). A second call does nothing."""
        with self.lock:
            if self.finished:
                return
            if unit is not None:
                self.unit = unit
            if done is not None:
                self.done = done
            if complete:
                self.total = self.done
            if note is not None:
                self.note = note
            self.complete = complete
            self.ended = time.monotonic()
        self.progress.display.finished(self)

    @property
    def finished(self) -> bool:
        return self.ended is not None

    @property
    def elapsed(self) -> float:
        return (self.ended if self.ended is not None else time.monotonic()) - self.started

    def rate(self) -> float | None:
        """Units per second over the last :data:`RATE_WINDOW` seconds (from the sample just before
        it when fewer than two fall inside; over the whole run once it is finished); None before
        anything moved."""
        with self.lock:
            if self.ended is not None:
                first, last = (self.started, 0), (self.ended, self.done)
            else:
                last = self._samples[-1]
                inside = [s for s in self._samples if s[0] >= last[0] - RATE_WINDOW]
                first = inside[0] if len(inside) >= 2 else self._samples[max(0, len(self._samples) - 2)]
        if last[1] <= first[1] or last[0] <= first[0]:
            return None if self.done == 0 else 0.0
        return (last[1] - first[1]) / (last[0] - first[0])

    def eta(self) -> float | None:
        """Seconds left at the current rate; None without a total or a rate."""
        rate = self.rate()
        if self.finished or self.total is None or self.done >= self.total or not rate:
            return None
        return max(0, self.total - self.done) / rate

    def count_text(self) -> str:
        """``40,000 / 98,203 rows (41%)``, or ``40,000 rows`` without a total; nothing for a stage
        that counts nothing (starting Spark)."""
        if self.total == 0 and self.done == 0:
            return ""
        if self.total is None:
            return f"{self.done:,} {self.unit}"
        share = f" ({100 * self.done // self.total}%)" if self.total > 0 else ""
        return f"{self.done:,} / {self.total:,} {self.unit}{share}"

    def rate_text(self) -> str:
        rate = self.rate()
        return "" if rate is None else f"{rate:,.0f} {self.unit}/s"

    def eta_text(self) -> str:
        if self.finished:
            return f"{'done in' if self.complete else 'stopped after'} {_seconds(self.elapsed)}"
        eta = self.eta()
        return "" if eta is None else f"ETA {_seconds(eta)}"

    def line(self) -> str:
        """The plain line: ``stage ingest.publish: 40,000 / 98,203 rows (41%), 12,300 rows/s, ETA 5 s``."""
        parts = [self.count_text(), self.rate_text(), self.eta_text(), self.note]
        return f"stage {self.name}: " + ", ".join(p for p in parts if p)


class _Display:
    """Shows tasks; the base shows nothing (library use)."""

    live = False
    #: seconds between two changes it shows (a source of numbers that cost something to count,
    #: like a broker's queue depth, need not be asked more often)
    every = 1.0

    def added(self, task: Task) -> None:
        pass

    def changed(self, task: Task) -> None:
        pass

    def finished(self, task: Task) -> None:
        pass

    def close(self) -> None:
        pass


class _Lines(_Display):
    """Log lines: one per task at most every ``every`` seconds when its count, total or note
    changed (and every :data:`QUIET_LINES` intervals when nothing did, to show it still runs),
    and one when it ends."""

    live = True

    def __init__(self, logger: logging.Logger, every: float) -> None:
        self.logger = logger
        self.every = every
        self._last: dict[int, tuple[float, tuple[int, int | None, str]]] = {}  # id(task) -> (when, what)
        self._lock = threading.Lock()

    def changed(self, task: Task) -> None:
        now = time.monotonic()
        what = (task.done, task.total, task.note)
        with self._lock:
            when, shown = self._last.get(id(task), (task.started, (0, task.total, "")))
            if now - when < self.every or (what == shown and now - when < QUIET_LINES * max(self.every, 1.0)):
                return
            self._last[id(task)] = (now, what)
        self.logger.info("%s", task.line())

    def finished(self, task: Task) -> None:
        with self._lock:
            self._last.pop(id(task), None)
        self.logger.info("%s", task.line())


class _Bars(_Display):
    """A ``rich`` progress display on stderr, one bar per task, kept on screen when closed.

    While it is drawn, the logging handlers that wrote to stderr write through it (their lines
    appear above the bars instead of tearing them); they get their stream back on :meth:`close`.
    """

    live = True

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, TextColumn
        from rich.progress import Progress as RichProgress
        from rich.table import Column

        def text(field: str, **layout: Any) -> TextColumn:
            return TextColumn(f"{{task.fields[{field}]}}", table_column=Column(no_wrap=True, **layout))

        self.console = console or Console(stderr=True)
        # the numbers keep their width on a narrow terminal; the note takes what is left
        self.rich = RichProgress(
            TextColumn("[bold]{task.description}", table_column=Column(no_wrap=True)),
            BarColumn(bar_width=24),
            text("count"), text("rate"), text("eta"), text("note", ratio=1, overflow="ellipsis"),
            console=self.console, redirect_stdout=False, redirect_stderr=True, refresh_per_second=4,
            expand=True,
        )
        self._ids: dict[int, Any] = {}
        self._handlers: list[tuple[logging.StreamHandler[Any], Any]] = []
        self._started = False
        self._lock = threading.Lock()

    def _start(self) -> None:
        if self._started:
            return
        before = sys.stderr
        self.rich.start()
        self._started = True
        for handler in _stream_handlers():
            if handler.stream is before and sys.stderr is not before:
                self._handlers.append((handler, handler.setStream(sys.stderr)))

    def _fields(self, task: Task) -> dict[str, Any]:
        return {"count": task.count_text(), "rate": task.rate_text(), "eta": task.eta_text(),
                "note": task.note}

    def added(self, task: Task) -> None:
        with self._lock:
            self._start()
            self._ids[id(task)] = self.rich.add_task(task.name, total=task.total, **self._fields(task))

    def changed(self, task: Task) -> None:
        with self._lock:
            self.rich.update(self._ids[id(task)], completed=task.done, total=task.total, **self._fields(task))

    def finished(self, task: Task) -> None:
        self.changed(task)

    def close(self) -> None:
        with self._lock:
            if not self._started:
                return
            self.rich.stop()
            self._started = False
            for handler, stream in self._handlers:
                handler.setStream(stream)
            self._handlers.clear()


def _stream_handlers() -> list[logging.StreamHandler[Any]]:
    """Every StreamHandler on the root logger and the named loggers."""
    loggers = [logging.getLogger()] + [
        obj for obj in logging.Logger.manager.loggerDict.values() if isinstance(obj, logging.Logger)
    ]
    return [h for lg in loggers for h in lg.handlers if isinstance(h, logging.StreamHandler)]


class Progress:
    """Where the stages of one run report how far they are (see the module docstring)."""

    def __init__(self, display: _Display | None = None) -> None:
        self.display = display or _Display()

    @classmethod
    def off(cls) -> Progress:
        """Shows nothing: the library's default."""
        return cls()

    @classmethod
    def lines(cls, *, every: float = LINE_EVERY, logger: logging.Logger | None = None) -> Progress:
        """A plain log line per stage every ``every`` seconds while it moves, and one at its end."""
        return cls(_Lines(logger or log, every))

    @classmethod
    def bars(cls, *, console: Any = None) -> Progress:
        """A ``rich`` display (on stderr, or ``console``)."""
        return cls(_Bars(console))

    @classmethod
    def auto(cls, stream: IO[str] | None = None) -> Progress:
        """Bars when ``stream`` (stderr) is a terminal ``rich`` can draw on, else plain lines."""
        stream = stream if stream is not None else sys.stderr
        try:
            from rich.console import Console
        except ImportError:  # the spark extra brings rich; without it, lines
            return cls.lines()
        console = Console(file=stream)
        drawable = console.is_terminal and not console.is_dumb_terminal
        return cls.bars(console=console) if drawable else cls.lines()

    @classmethod
    def choose(cls, choice: str, stream: IO[str] | None = None) -> Progress:
        """The CLI's ``--progress``: ``auto``, ``bars``, ``lines`` or ``none``."""
        if choice == "none":
            return cls.off()
        if choice == "lines":
            return cls.lines()
        if choice == "bars":
            from rich.console import Console

            return cls.bars(console=Console(file=stream if stream is not None else sys.stderr))
        return cls.auto(stream)

    @property
    def live(self) -> bool:
        """Whether anything is shown (a caller skips the work of counting otherwise)."""
        return self.display.live

    @property
    def every(self) -> float:
        """Seconds between two updates that show anything new (plain lines: :data:`LINE_EVERY`)."""
        return float(self.display.every)

    @property
    def spark_conf(self) -> dict[str, str]:
        """Spark settings for a session started to be watched (:data:`SPARK_CONF`), none when off."""
        return dict(SPARK_CONF) if self.live else {}

    def task(self, name: str, *, total: int | None = None, unit: str = "rows") -> Task:
        task = Task(self, name, total, unit)
        self.display.added(task)
        return task

    def close(self) -> None:
        """Stop drawing (bars stay on screen as they last were)."""
        self.display.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def watch_spark(spark: Any, task: Task, *, every: float = SPARK_POLL) -> Iterator[None]:
    """While the block runs Spark jobs, a driver thread reads their progress every ``every``
    seconds (:class:`babelq.spark.status.JobRows`: rows, or tasks) into ``task``; stopped, and
    joined, when the block ends. Nothing happens when the task's progress is not shown."""
    if not task.progress.live:
        yield
        return
    from babelq.spark.status import JobRows

    try:
        jobs = JobRows(spark)
    except Exception:  # a session without the JVM's status store (Spark Connect): counts at the end only
        log.debug("Spark's progress cannot be read from this session", exc_info=True)
        yield
        return
    stop = threading.Event()
    row_total = task.total

    def poll() -> None:
        while not stop.wait(every):
            try:
                seen = jobs.read()
            except Exception:  # a metric Spark no longer has (the context stopping): progress only
                log.debug("reading Spark's progress failed", exc_info=True)
                continue
            total = row_total if seen.unit == "rows" else seen.total
            note = f"{seen.read:,} read" if seen.read is not None and seen.read > seen.done else ""
            task.update(seen.done, total=total, unit=seen.unit, note=note)

    thread = threading.Thread(target=poll, name=f"babelq-progress-{task.name}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def bulk_file_rows(source: str | Path) -> int | None:
    """How many rows Spark will read from a local bulk file, known before it does: a CSV file's
    records after the header (a line break inside a quoted field is no new record), a Parquet
    file's (or dataset's) row counts from its footers. None for anything else (a remote path). A
    count the file's blank lines inflate is corrected when the stage ends."""
    path = Path(source)
    try:
        if path.is_dir() or path.suffix.lower() == ".parquet":
            import pyarrow.parquet as pq

            files = [path] if path.is_file() else sorted(path.rglob("*.parquet"))
            return sum(int(pq.read_metadata(f).num_rows) for f in files)
        layout = csv_layout(path)
        return None if layout is None else layout.records
    except Exception:  # progress only: a file that cannot be counted here gets no total
        return None


class SettleProgress:
    """settle's ``on_poll`` hook: messages settled of the total, and how many are in flight.

    Settled: messages with a final outcome (posted, dropped as a duplicate, dead-lettered), from
    :class:`~babelq.pipelines.settle.SettleStats`, so it moves once per micro-batch: a retried or
    deferred message is not settled yet, it comes back. Between micro-batches the broker says how
    many messages are reserved (``depth``: (waiting, reserved)): the ones the running micro-batch
    holds. The total is ``total`` when the caller knows it (the demo: rows published + poison),
    else what is known now: settled + waiting + reserved.
    """

    def __init__(self, task: Task, depth: Callable[[], tuple[int, int | None]], *,
                 every: float | None = None) -> None:
        self.task = task
        self.depth = depth
        #: the broker is asked at most this often (default: as often as the display shows news; a
        #: count of a big SQLite queue costs tens of milliseconds of a core that settle needs)
        self.every = task.progress.every if every is None else every
        self.known_total = task.total is not None
        self._last = 0.0
        self.waiting = 0
        self.reserved: int | None = None

    @staticmethod
    def settled(stats: SettleStats) -> int:
        """Messages with a final outcome so far (not retried, not deferred: those come back)."""
        return stats.settled

    def note(self) -> str:
        held = "? reserved" if self.reserved is None else f"{self.reserved:,} reserved (being settled)"
        return f"{held}, {self.waiting:,} waiting"

    def __call__(self, stats: SettleStats) -> None:
        if not self.task.progress.live:
            return
        now = time.monotonic()
        if now - self._last < self.every:
            return
        self._last = now
        # asked before the broker: an ack landing between the two then hides a few reserved
        # messages for one update instead of counting them twice
        handled = stats.unacked
        waiting, reserved = self.waiting, self.reserved
        try:
            waiting, reserved = self.depth()
            reserved = None if reserved is None else max(0, reserved - handled)
        except Exception:  # a broker hiccup costs a progress update, never the run
            log.debug("settle progress: the queue depth could not be read", exc_info=True)
        done = self.settled(stats)
        total = self.task.total if self.known_total else None
        done, self.reserved, self.waiting = settle_counts(done, waiting, reserved, total)
        self.task.update(done, total=-1 if self.known_total else done + self.waiting + (self.reserved or 0),
                         note=self.note())

    def finish(self, run: SettleRun) -> None:
        """The run ended: complete when the queue was drained, else it stays short of the total."""
        total = self.task.total if self.known_total else None
        done, self.reserved, self.waiting = settle_counts(self.settled(run.stats), run.waiting, run.reserved,
                                                          total)
        note = "queue drained" if run.drained else self.note()
        self.task.finish(done, complete=run.drained, note=note)


def queue_depth(transport: Transport, queue: str) -> tuple[int, int | None]:
    """(waiting, reserved) on ``queue`` for :class:`SettleProgress`. Reserved is read first: a
    message reserved between the two reads is then counted in neither, never in both."""
    reserved = transport.reserved(queue)
    return transport.size(queue), reserved


def settle_counts(done: int, waiting: int, reserved: int | None,
                  total: int | None) -> tuple[int, int | None, int]:
    """(settled, reserved, waiting) as shown: each at least 0 and, with a known ``total``, their sum
    at most it.

    The three are read at different moments from different places (settled from the finished
    micro-batches, the other two from the broker), and a message moves meanwhile: a micro-batch's
    messages stay reserved until the next one acks them although they are settled already, and one
    reserved between the two reads of the broker is seen in both. Settled is exact, so what
    overlaps is taken off the reserved first (they are the ones settled but not yet acked), then
    off the waiting."""
    done = max(0, done)
    if total is not None:
        done = min(done, max(0, total))
    left = None if total is None else max(0, total) - done
    held = None if reserved is None else max(0, reserved)
    if held is not None and left is not None:
        held = min(held, left)
        left -= held
    waiting = max(0, waiting)
    if left is not None:
        waiting = min(waiting, left)
    return done, held, waiting

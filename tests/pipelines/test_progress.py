"""Progress of the long stages: the plain lines, the rich bars, settle's counts; no Spark here.

The counts of a real run (Spark's metrics during ingest, settle's micro-batches) are checked on
the shared 2,000-row demo in ``test_demo.py``.
"""

from __future__ import annotations

import io
import logging
import re
import time
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from babelq.pipelines.progress import (
    Progress,
    SettleProgress,
    Task,
    bulk_file_rows,
    queue_depth,
    settle_counts,
)
from babelq.pipelines.settle import SettleRun, SettleStats
from babelq.pipelines.stages import StageClock, reasons_text


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def lines() -> Iterator[tuple[logging.Logger, Lines]]:
    logger = logging.getLogger("babelq.tests.progress")
    handler = Lines()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield logger, handler
    finally:
        logger.removeHandler(handler)


def test_a_task_says_how_many_of_how_many_how_fast_and_how_long_still() -> None:
    task = Progress.lines().task("ingest.publish", total=100_000)
    task._samples.clear()
    now = time.monotonic()
    task._samples.extend([(now - 4.0, 0), (now, 40_000)])  # 10,000 rows/s over the last 4 s
    task.done = 40_000
    assert task.count_text() == "40,000 / 100,000 rows (40%)"
    assert task.rate_text() == "10,000 rows/s"
    assert task.eta_text() == "ETA 6 s"
    assert task.line() == "stage ingest.publish: 40,000 / 100,000 rows (40%), 10,000 rows/s, ETA 6 s"
    task.finish(98_203)  # the exact count of the stage: the whole of it
    assert task.count_text() == "98,203 / 98,203 rows (100%)" and task.eta_text().startswith("done in")
    task.update(5)  # finished: nothing moves any more
    assert task.done == 98_203


def test_without_a_total_the_line_has_the_count_and_no_eta() -> None:
    task = Progress.lines().task("ingest.validate")
    task.update(0)
    assert task.line() == "stage ingest.validate: 0 rows"
    task.update(3, total=None, unit="tasks")  # Spark's tasks when a job has no row count
    assert task.count_text() == "3 tasks" and task.eta() is None


def test_plain_lines_come_at_their_interval_and_when_the_stage_ends(
    lines: tuple[logging.Logger, Lines],
) -> None:
    logger, handler = lines
    progress = Progress.lines(every=3600, logger=logger)
    task = progress.task("ingest.publish", total=1_000)
    task.update(10)
    task.update(500)  # both within the interval of the first line: nothing yet
    assert handler.lines == []
    task.started -= 7200  # the interval has passed since the task began
    task.update(600)
    task.update(700)  # within the interval of the line just written
    task.finish(1_000)
    assert [line.split(", ")[0] for line in handler.lines] == [
        "stage ingest.publish: 600 / 1,000 rows (60%)", "stage ingest.publish: 1,000 / 1,000 rows (100%)"]
    assert "done in" in handler.lines[-1]


def test_off_shows_nothing_and_a_failed_stage_stays_short_of_its_total(
    lines: tuple[logging.Logger, Lines],
) -> None:
    assert not Progress.off().live and Progress.off().spark_conf == {}
    logger, handler = lines
    clock = StageClock(progress=Progress.lines(every=0, logger=logger))
    with pytest.raises(RuntimeError), clock.stage("ingest.publish", total=500) as st:
        st.progress.update(200)
        raise RuntimeError("broker gone")
    assert handler.lines[-1].startswith("stage ingest.publish: 0 / 500 rows (0%)")
    assert "stopped after" in handler.lines[-1]


def test_a_clock_asks_for_a_total_only_when_progress_is_shown() -> None:
    asked: list[str] = []

    def total() -> int:
        asked.append("x")
        return 7

    with StageClock().stage("a", total=total) as st:
        st.rows = 7
    assert asked == []
    with StageClock(progress=Progress.lines()).stage("b", total=total) as st:
        assert st.progress.total == 7
        st.rows = 7
    assert asked == ["x"]


def test_bars_draw_on_a_terminal_and_give_the_log_handlers_back() -> None:
    from rich.console import Console

    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=120)
    handler = logging.StreamHandler(__import__("sys").stderr)
    logging.getLogger("babelq.tests.bars").addHandler(handler)
    before = handler.stream
    try:
        with Progress.bars(console=console) as progress:
            task = progress.task("ingest.publish", total=2_000)
            task.update(1_000)
            assert handler.stream is not before  # writes through the display while it is drawn
            task.finish(2_000)
        assert handler.stream is before
    finally:
        logging.getLogger("babelq.tests.bars").removeHandler(handler)
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
    assert "ingest.publish" in drawn and "2,000 / 2,000 rows (100%)" in drawn


def test_auto_draws_bars_only_on_a_terminal() -> None:
    assert isinstance(Progress.auto(io.StringIO()).display, type(Progress.lines().display))
    assert Progress.choose("none").live is False
    assert Progress.choose("lines").spark_conf == {"spark.executor.heartbeatInterval": "2s"}


def test_settle_progress_counts_finished_messages_and_says_what_is_reserved() -> None:
    depths = iter([(700, 100), (0, 1_960), (0, None)])
    task = Progress.lines().task("settle", total=2_000, unit="messages")
    watch = SettleProgress(task, lambda: next(depths), every=0.0)
    stats = SettleStats()
    watch(stats)
    assert task.line().startswith("stage settle: 0 / 2,000 messages (0%)")
    assert task.note == "100 reserved (being settled), 700 waiting"
    watch(stats)
    assert task.note == "1,960 reserved (being settled), 0 waiting"
    # retried and deferred messages come back: they are not settled yet
    stats.record({("posted", ""): 1_900, ("dead_lettered", "expired"): 40, ("retried", "core_banking"): 20,
                  ("deferred", ""): 5})
    watch(stats)
    assert task.done == 1_940 and task.note == "? reserved, 0 waiting"
    watch.finish(SettleRun(stats, 3.0, drained=False, waiting=60, reserved=0))
    assert task.total == 2_000 and "stopped after" in task.line() and task.note.endswith("60 waiting")


def test_settle_progress_asks_the_broker_no_more_often_than_the_display_shows_news() -> None:
    """Counting a big SQLite queue costs tens of milliseconds of a core settle needs: plain lines
    come every 5 s, so the depth is asked every 5 s, not every second."""
    asked: list[float] = []

    def depth() -> tuple[int, int | None]:
        asked.append(time.monotonic())
        return 10, 5

    stats = SettleStats()
    watch = SettleProgress(Progress.lines().task("settle", total=100, unit="messages"), depth)
    assert watch.every == 5.0
    for _ in range(3):
        watch(stats)
    assert len(asked) == 1
    assert SettleProgress(Progress.lines(every=2.0).task("s"), depth).every == 2.0
    assert SettleProgress(Progress.off().task("s"), depth).every == 1.0


def test_settle_progress_without_a_known_total_counts_what_is_known_now() -> None:
    task = Progress.lines().task("settle", unit="messages")
    watch = SettleProgress(task, lambda: (50, 25), every=0.0)
    stats = SettleStats()
    stats.record({("posted", ""): 10})
    stats.last_batch_acked = True  # the 25 reserved are the next micro-batch's
    watch(stats)
    assert (task.done, task.total) == (10, 10 + 50 + 25)


def test_the_rows_of_a_bulk_file_are_known_before_spark_reads_it(tmp_path: pytest.TempPathFactory) -> None:
    path = tmp_path / "p.csv"  # type: ignore[operator]
    path.write_text("payment_reference,amount_cents\nA,1\nB,2\nC,3")  # no newline at the end
    assert bulk_file_rows(path) == 3
    path.write_text("payment_reference,amount_cents\nA,1\n")
    assert bulk_file_rows(path) == 1
    assert bulk_file_rows(tmp_path / "missing.csv") is None  # type: ignore[operator]


def test_a_bulk_file_counts_records_not_lines(tmp_path: pytest.TempPathFactory) -> None:
    path = tmp_path / "p.csv"  # type: ignore[operator]
    # quoted line breaks (LF, CRLF) and doubled quotes stay inside their record
    path.write_bytes(b'payment_reference,narrative\r\n"A\n1","x ""y\r\nz"" w"\r\nB,"2"\r\n"C",3')
    assert bulk_file_rows(path) == 3


def test_task_rate_is_over_the_recent_window() -> None:
    task = Task(Progress.off(), "x", 100, "rows")
    now = time.monotonic()
    task._samples.clear()
    task._samples.extend([(now - 30, 0), (now - 2, 10), (now, 30)])
    assert task.rate() == pytest.approx(10, rel=0.01)  # 20 rows in the last 2 s, not 30 in 30 s
    task._samples.clear()
    task._samples.extend([(now - 30, 0), (now, 30)])  # nothing inside the window but the last
    assert task.rate() == pytest.approx(1, rel=0.01)


def test_a_session_whose_progress_cannot_be_read_only_loses_the_live_counts() -> None:
    from babelq.pipelines.progress import watch_spark

    task = Progress.lines().task("ingest.validate")
    with watch_spark(object(), task):  # no JVM status store behind it
        task.update(5)
    assert task.done == 5


@given(done=hs.integers(-5, 3_000), waiting=hs.integers(-5, 3_000),
       reserved=hs.none() | hs.integers(-5, 3_000), total=hs.none() | hs.integers(0, 2_000))
def test_settled_reserved_and_waiting_never_add_up_to_more_than_the_total(
    done: int, waiting: int, reserved: int | None, total: int | None
) -> None:
    """Read at different moments, a message can be counted settled and reserved (its micro-batch
    finished, the ack comes with the next), or reserved and waiting (taken between two reads)."""
    shown_done, shown_reserved, shown_waiting = settle_counts(done, waiting, reserved, total)
    assert min(shown_done, shown_waiting, shown_reserved or 0) >= 0
    assert (shown_reserved is None) == (reserved is None)
    if total is None:  # nothing to hold them to: only the negatives go
        assert (shown_done, shown_reserved, shown_waiting) == (
            max(0, done), None if reserved is None else max(0, reserved), max(0, waiting))
    else:
        assert shown_done + (shown_reserved or 0) + shown_waiting <= total
        assert shown_done == min(max(0, done), total)  # the exact count is kept whole


@given(done=hs.integers(0, 2_000), overlap=hs.integers(0, 2_000), ahead=hs.integers(0, 2_000))
def test_the_settle_line_never_shows_more_than_the_total(done: int, overlap: int, ahead: int) -> None:
    """A micro-batch's messages still reserved after it finished (``overlap``) plus the ones taken
    meanwhile (``ahead``): the line stays within what there is."""
    total = done + ahead
    task = Progress.lines().task("settle", total=total, unit="messages")
    stats = SettleStats()
    stats.record({("posted", ""): done, ("retried", "core_banking"): overlap})
    SettleProgress(task, lambda: (ahead, overlap + ahead), every=0.0)(stats)
    held, waiting = (int(n.split()[0].replace(",", "")) for n in task.note.replace("? ", "0 ").split(", "))
    assert task.done == done and task.done + held + waiting <= total == task.total


def test_the_broker_is_asked_for_the_reserved_before_the_waiting() -> None:
    """A message reserved between the two reads is then counted in neither, never in both."""
    from babelq.transports.base import Outgoing
    from babelq.transports.memory import MemoryTransport

    transport = MemoryTransport()
    transport.publish_many("q", [Outgoing(b"{}") for _ in range(3)])
    asked: list[str] = []
    size, reserved = transport.size, transport.reserved
    transport.size = lambda queue: asked.append("waiting") or size(queue)  # type: ignore[method-assign]
    transport.reserved = lambda queue: asked.append("reserved") or reserved(queue)  # type: ignore[method-assign]
    assert queue_depth(transport, "q") == (3, 0) and asked == ["reserved", "waiting"]


def test_every_stage_says_rows_or_messages() -> None:
    clock = StageClock()
    with clock.stage("ingest.publish") as st:
        st.rows = 1_958
    with clock.stage("settle", unit="messages") as st:
        st.rows = 2_002
    assert [s.count_text() for s in clock.stages] == ["1,958 rows", "2,002 messages"]
    assert clock.stages[1].rate_text().endswith(" messages/s")
    assert reasons_text({"expired": 3, "bad_iban": 1_200}) == "bad_iban: 1,200, expired: 3"
    assert reasons_text({}) == "none"


def test_a_finished_micro_batch_still_reserved_is_not_counted_again() -> None:
    """Its messages are settled; the broker holds them reserved until the ack: without a known
    total, the total is not inflated by them."""
    task = Progress.lines().task("settle", unit="messages")
    stats = SettleStats()
    stats.record({("posted", ""): 90, ("retried", "core_banking"): 10})
    watch = SettleProgress(task, lambda: (10, 100), every=0.0)
    watch(stats)
    assert (task.done, task.total, watch.reserved, watch.waiting) == (90, 100, 0, 10)
    stats.last_batch_acked = True  # acked: what the broker still reserves is the next batch's
    watch.depth = lambda: (0, 10)
    watch(stats)
    assert (task.done, task.total, watch.reserved) == (90, 100, 10)

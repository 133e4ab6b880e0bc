"""SQLite-specific behaviour beyond the contract: URLs, durability, processes, threads, pickling."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from babelq.errors import ConfigurationError, UnavailableError
from babelq.transports import Outgoing, open_transport
from babelq.transports.sqlite import MESSAGES, STATE, SQLiteTransport


def test_url_selects_sqlite_and_reads_options(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "q.db"
    path.parent.mkdir()
    t = open_transport(f"sqlite://{path}?visibility_timeout=5&poll_interval=0.01&synchronous=full")
    try:
        assert isinstance(t, SQLiteTransport)
        assert t.path == str(path)
        assert path.exists()  # file and schema written at open
        assert t.visibility_timeout == 5.0
        assert t.poll_interval == 0.01
        assert t.synchronous == "FULL"
    finally:
        t.close()


def test_keyword_options_win_over_the_url(tmp_path: Path) -> None:
    t = SQLiteTransport.from_url(f"sqlite://{tmp_path}/q.db?visibility_timeout=5", visibility_timeout=2)
    try:
        assert t.visibility_timeout == 2
    finally:
        t.close()


def test_relative_path_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    t = SQLiteTransport.from_url("sqlite://data/q.db")
    try:
        assert t.path == "data/q.db"
        assert (tmp_path / "data" / "q.db").exists()
    finally:
        t.close()


@pytest.mark.parametrize(
    "url",
    ["sqlite://", "sqlite:///tmp/x.db?colour=blue", "sqlite:///tmp/x.db?visibility_timeout=soon"],
)
def test_bad_urls_are_configuration_errors(url: str) -> None:
    with pytest.raises(ConfigurationError):
        SQLiteTransport.from_url(url)


@pytest.mark.parametrize(
    "options", [{"visibility_timeout": 0}, {"synchronous": "sometimes"}, {"poll_interval": 0}]
)
def test_bad_options_are_configuration_errors(tmp_path: Path, options: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        SQLiteTransport(tmp_path / "q.db", **options)  # type: ignore[arg-type]


def test_database_is_in_wal_mode(tmp_path: Path) -> None:
    t = SQLiteTransport(tmp_path / "q.db")
    t.close()
    with sqlite3.connect(tmp_path / "q.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_messages_survive_closing_and_reopening(tmp_path: Path) -> None:
    first = SQLiteTransport(tmp_path / "q.db")
    first.publish_many("q", [Outgoing(b"one"), Outgoing(b"two")])
    first.close()
    second = SQLiteTransport(tmp_path / "q.db")
    try:
        got = second.reserve("q", max_messages=5)
        assert [d.body for d in got] == [b"one", b"two"]
        second.ack_many(got)
    finally:
        second.close()


def test_body_is_stored_as_a_blob_of_the_exact_bytes(tmp_path: Path) -> None:
    body = '{"name":"Zoë"}'.encode()
    t = SQLiteTransport(tmp_path / "q.db")
    t.publish("q", body)
    t.close()
    with sqlite3.connect(tmp_path / "q.db") as conn:
        stored, kind = conn.execute(f"SELECT body, typeof(body) FROM {MESSAGES}").fetchone()
    assert kind == "blob"
    assert stored == body


def test_use_after_close_is_an_error(tmp_path: Path) -> None:
    t = SQLiteTransport(tmp_path / "q.db")
    t.close()
    with pytest.raises(ConfigurationError):
        t.publish("q", b"x")


def test_a_foreign_receipt_is_rejected(tmp_path: Path) -> None:
    from babelq.transports import Delivery

    t = SQLiteTransport(tmp_path / "q.db")
    try:
        with pytest.raises(ValueError):
            t.ack(Delivery(body=b"x", queue="q", receipt=42))
    finally:
        t.close()


def test_one_instance_shared_by_threads(tmp_path: Path) -> None:
    t = SQLiteTransport(tmp_path / "q.db", visibility_timeout=60)
    total = 400
    t.publish_many("q", [Outgoing(b"%d" % i) for i in range(total)])
    seen: list[bytes] = []
    lock = threading.Lock()

    def work() -> None:
        while True:
            got = t.reserve("q", max_messages=7, timeout=0.2)
            if not got:
                return
            with lock:
                seen.extend(d.body for d in got)
            t.ack_many(got)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    t.close()
    assert len(seen) == total
    assert sorted(seen) == sorted(b"%d" % i for i in range(total))


def test_pickled_transport_reopens_the_same_file(tmp_path: Path) -> None:
    t = SQLiteTransport(tmp_path / "q.db", visibility_timeout=7)
    t.publish("q", b"x")
    copy = pickle.loads(pickle.dumps(t))
    try:
        assert isinstance(copy, SQLiteTransport)
        assert copy is not t
        assert copy.visibility_timeout == 7
        [delivery] = copy.reserve("q")
        assert delivery.body == b"x"
        copy.ack(delivery)
        assert t.size("q") == 0
    finally:
        copy.close()
        t.close()


def _consume_in_process(path: str, out: multiprocessing.Queue[list[bytes]]) -> None:
    t = SQLiteTransport(path, visibility_timeout=60)
    seen: list[bytes] = []
    while True:
        got = t.reserve("q", max_messages=25, timeout=0.5)
        if not got:
            break
        seen.extend(d.body for d in got)
        t.ack_many(got)
    t.close()
    out.put(seen)


@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_several_processes_share_one_file(tmp_path: Path, start_method: str) -> None:
    total = 3000
    path = str(tmp_path / "q.db")
    parent = SQLiteTransport(path)
    parent.publish_many("q", [Outgoing(b"%d" % i) for i in range(total)])
    ctx: Any = multiprocessing.get_context(start_method)
    out: multiprocessing.Queue[list[bytes]] = ctx.Queue()
    workers = [ctx.Process(target=_consume_in_process, args=(path, out)) for _ in range(3)]
    for worker in workers:
        worker.start()
    results = [out.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    seen = [body for result in results for body in result]
    assert len(seen) == total, "a row was claimed by two processes, or lost"
    assert sorted(seen) == sorted(b"%d" % i for i in range(total))
    # the parent's connection is still usable after the fork
    assert parent.size("q") == 0
    parent.close()


def _reserve_then_die(path: str) -> None:
    t = SQLiteTransport(path, visibility_timeout=1)
    assert len(t.reserve("q", max_messages=3)) == 3
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_killed_process_loses_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "q.db")
    t = SQLiteTransport(path, visibility_timeout=1)
    t.publish_many("q", [Outgoing(b"%d" % i) for i in range(5)])
    victim = multiprocessing.get_context("spawn").Process(target=_reserve_then_die, args=(path,))
    victim.start()
    victim.join(timeout=30)
    assert victim.exitcode == -signal.SIGKILL
    first = t.reserve("q", max_messages=5)
    assert [d.body for d in first] == [b"3", b"4"]  # the killed worker's three are still leased
    t.ack_many(first)
    again = t.reserve("q", max_messages=5, timeout=3)
    assert sorted(d.body for d in again) == [b"0", b"1", b"2"]
    assert all(d.delivery_count == 2 for d in again)
    t.ack_many(again)
    assert t.size("q") == 0
    t.close()


def _rows_seen_by_another_process(path: str) -> int:
    """Count the rows through a connection in a new process that closes when done (as a Spark
    task, a CLI peek or a finished worker does)."""
    import subprocess
    import sys

    peek = (f"import sqlite3; c = sqlite3.connect({path!r}); "
            f"print(c.execute('SELECT count(*) FROM {STATE}').fetchone()[0]); c.close()")
    done = subprocess.run([sys.executable, "-c", peek], check=True, capture_output=True, text=True)
    return int(done.stdout)


def test_opening_the_file_again_in_the_same_process_loses_no_later_write(tmp_path: Path) -> None:
    # A second transport on a file this process already has open must not drop the process's
    # file locks: another process closing its connection would then take itself for the last
    # one, fold the write-ahead log into the file and delete it, and the first transport's later
    # commits would go to the deleted log, seen by nobody else.
    path = str(tmp_path / "q.db")
    first = SQLiteTransport(path)
    first.publish_many("q", [Outgoing(b"%d" % i) for i in range(10)])
    second = SQLiteTransport(path, create=False)
    assert _rows_seen_by_another_process(path) == 10
    first.publish_many("q", [Outgoing(b"%d" % i) for i in range(10, 15)])
    assert first.size("q") == 15
    assert _rows_seen_by_another_process(path) == 15
    assert (tmp_path / "q.db-wal").exists()  # this process still has the database open
    second.close()
    first.close()


# -- paths and file mode (issue 10) --------------------------------------------------------


def _one_line_error(url: str) -> str:
    with pytest.raises(ConfigurationError) as caught:
        open_transport(url)
    text = str(caught.value)
    assert "\n" not in text, text
    return text


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc, where no file can be created")
def test_a_path_the_os_refuses_is_one_line_naming_the_path_and_the_reason() -> None:
    text = _one_line_error("sqlite:///proc/q.db")
    assert "'/proc/q.db'" in text and "No such file or directory" in text


def test_a_missing_directory_is_refused_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent" / "dir"
    text = _one_line_error(f"sqlite://{missing}/q.db")
    assert repr(str(missing)) in text
    assert not (tmp_path / "nonexistent").exists()


def test_a_relative_path_in_a_missing_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert "'data'" in _one_line_error("sqlite://data/q.db")
    assert not (tmp_path / "data").exists()


def test_a_directory_in_place_of_the_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "q.db").mkdir()
    text = _one_line_error(f"sqlite://{tmp_path}/q.db")
    assert str(tmp_path / "q.db") in text and "Is a directory" in text


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    (tmp_path / "q.db").write_bytes(b"this is not an sqlite database, it is a text file of some length" * 20)
    text = _one_line_error(f"sqlite://{tmp_path}/q.db")
    assert str(tmp_path / "q.db") in text and "not a database" in text


@pytest.fixture(params=[0o000, 0o022, 0o077], ids=["umask000", "umask022", "umask077"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    mask: int = request.param
    previous = os.umask(mask)
    try:
        yield mask
    finally:
        os.umask(previous)


def test_the_database_and_its_wal_and_shm_files_are_owner_only(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "q.db"
    t = SQLiteTransport(path)
    try:
        t.publish("q", b"x")  # the -wal and -shm files exist while a connection is open
        for name in ("q.db", "q.db-wal", "q.db-shm"):
            assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, (name, oct(umask))
    finally:
        t.close()


def test_an_existing_database_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    SQLiteTransport(path).close()
    path.chmod(0o640)  # shared with a group on purpose: not ours to tighten
    SQLiteTransport(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_database_locked_past_busy_timeout_at_open_is_unavailable(tmp_path: Path) -> None:
    """Another process holding the lock is an outage to wait out, not a wrong path."""
    holder = sqlite3.connect(tmp_path / "q.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(UnavailableError, match="locked") as caught:
            SQLiteTransport(tmp_path / "q.db", busy_timeout=0)
        assert "\n" not in str(caught.value)
        assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


# -- a consumer never creates a queue database ---------------------------------------------------


def test_a_consumer_open_of_a_missing_database_is_refused_not_created(tmp_path: Path) -> None:
    """Issue 11: a consumer given a wrong or relative path (on a cluster: relative to another
    machine's working directory) must not read a new, empty queue and call it drained."""
    path = tmp_path / "q.db"
    for opener in (
        lambda: SQLiteTransport(path, create=False),
        lambda: open_transport(f"sqlite://{path}?create=false"),
        lambda: open_transport(f"sqlite://{path}", **SQLiteTransport.holder_options(
            max_held=10, visibility_timeout=5, snapshot=False)),
    ):  # fmt: skip
        with pytest.raises(ConfigurationError) as caught:
            opener()
        text = str(caught.value)
        assert "\n" not in text
        assert repr(str(path)) in text and "does not create" in text
        assert not path.exists()


def test_a_consumer_opens_an_existing_database_and_a_publisher_creates_one(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    publisher = SQLiteTransport(path)  # the default, create=True: what publishers open
    publisher.publish("q", b"x")
    consumer = open_transport(f"sqlite://{path}", **SQLiteTransport.holder_options(
        max_held=10, visibility_timeout=5, snapshot=True))  # fmt: skip
    try:
        assert isinstance(consumer, SQLiteTransport) and consumer.create is False
        assert [d.body for d in consumer.reserve("q")] == [b"x"]
        copy = pickle.loads(pickle.dumps(consumer))  # shipped to an executor: still a consumer
        assert isinstance(copy, SQLiteTransport) and copy.create is False
        copy.close()
    finally:
        consumer.close()
        publisher.close()


def test_create_option_in_the_url_must_be_a_boolean(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"create.*boolean"):
        open_transport(f"sqlite://{tmp_path}/q.db?create=maybe")


def test_a_tag_takes_rows_under_one_lease_token_found_by_index(tmp_path: Path) -> None:
    """The driver settles "every row with the tag's token" in one statement, through the partial
    index on lease (waiting rows, lease NULL, are not in it)."""
    from babelq.transports.sqlite import tag_lease

    t = SQLiteTransport(tmp_path / "q.db")
    try:
        t.publish_many("q", [Outgoing(b"%d" % i) for i in range(4)])
        tag = "00112233445566778899aabbccddeeff"
        held = t.reserve_tagged("q", tag, max_messages=3)
        with sqlite3.connect(tmp_path / "q.db") as raw:
            leases = {row[0] for row in raw.execute(f"SELECT lease FROM {STATE} WHERE lease IS NOT NULL")}
            query = f"EXPLAIN QUERY PLAN DELETE FROM {STATE} WHERE lease = ? AND queue = ?"
            plan = " ".join(str(row[-1]) for row in raw.execute(query, (1, "q")))
        assert leases == {tag_lease(tag)} and tag_lease(tag) < 0  # never a random token (>= 0)
        assert "babelq_state_lease" in plan
        assert t.ack_tagged("q", [tag]) == 3
        assert [d.body for d in t.reserve("q")] == [b"3"] and len(held) == 3
    finally:
        t.close()


def test_leasing_rows_does_not_rewrite_their_bodies(tmp_path: Path) -> None:
    """A claim changes a row's lease and due time only: what it writes to the write-ahead log is
    far smaller than the bodies it leases (in one table it rewrote every body it leased)."""
    path = tmp_path / "q.db"
    t = SQLiteTransport(path)
    try:
        t.publish_many("q", [Outgoing(bytes([65 + i % 26]) * 8192) for i in range(400)])  # 3.3 MB
        with sqlite3.connect(path) as raw:
            raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        wal = Path(f"{path}-wal")
        assert wal.stat().st_size == 0
        held = t.reserve_tagged("q", "00112233445566778899aabbccddeeff", max_messages=400)
        assert len(held) == 400 and held[7].body == b"H" * 8192
        assert wal.stat().st_size < 400 * 8192 / 8
        released = t.reserve("q", max_messages=400)
        assert released == [] and t.renew_tagged("q", ["00112233445566778899aabbccddeeff"]) == 400
        assert wal.stat().st_size < 400 * 8192 / 8
    finally:
        t.close()


# the layout babelq used before the bodies moved out of the state rows
_ONE_TABLE = (
    """CREATE TABLE babelq_messages (
        id INTEGER PRIMARY KEY, queue TEXT NOT NULL, body BLOB NOT NULL,
        available_at INTEGER NOT NULL, lease INTEGER, delivery_count INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL, headers TEXT)""",
    "CREATE INDEX babelq_messages_next ON babelq_messages (queue, available_at, id)",
    "CREATE INDEX babelq_messages_lease ON babelq_messages (lease) WHERE lease IS NOT NULL",
    "CREATE TABLE babelq_reads (tag INTEGER PRIMARY KEY, queue TEXT NOT NULL, taken_at INTEGER NOT NULL)",
)


def test_a_one_table_database_moves_to_two_tables_keeping_every_row_and_lease(tmp_path: Path) -> None:
    """Waiting, delayed and leased rows survive the move with their ids, counts and headers, and a
    tag's reservation taken before the upgrade is acked after it."""
    from babelq.transports.sqlite import tag_lease

    tag = "00112233445566778899aabbccddeeff"
    far = 4_000_000_000_000
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as old:
        for statement in _ONE_TABLE:
            old.execute(statement)
        old.executemany(
            "INSERT INTO babelq_messages (id, queue, body, available_at, lease, delivery_count,"
            " created_at, headers) VALUES (?, 'q', ?, ?, ?, ?, 5, ?)",
            [
                (3, b"waiting", 0, None, 0, '{"traceparent":"tp"}'),
                (7, b"delayed", far, None, 0, None),
                (9, b"held-1", far, tag_lease(tag), 2, None),
                (11, b"held-2", far, tag_lease(tag), 1, None),
            ],
        )
        old.execute("INSERT INTO babelq_reads VALUES (?, 'q', 1)", (tag_lease(tag),))
    openers = [threading.Thread(target=lambda: SQLiteTransport(path).close()) for _ in range(3)]
    for opener in openers:
        opener.start()
    for opener in openers:
        opener.join()
    t = SQLiteTransport(path)
    try:
        with sqlite3.connect(path) as raw:
            kinds = dict(raw.execute("SELECT name, type FROM sqlite_master WHERE name LIKE 'babelq_%'"))
            columns = "id, body, delivery_count, created_at, headers"
            rows = raw.execute(f"SELECT {columns} FROM {MESSAGES} ORDER BY id")
            assert list(rows) == [
                (3, b"waiting", 0, 5, '{"traceparent":"tp"}'), (7, b"delayed", 0, 5, None),
                (9, b"held-1", 2, 5, None), (11, b"held-2", 1, 5, None),
            ]  # fmt: skip
        assert (kinds[MESSAGES], kinds[STATE]) == ("view", "table")
        assert "babelq_messages_one_table" not in kinds
        assert t.size("q") == 2 and t.reserved("q") == 2
        [waiting] = t.reserve("q", max_messages=5)
        assert (waiting.body, dict(waiting.carried_headers), waiting.delivery_count) == (
            b"waiting", {"traceparent": "tp"}, 1)
        assert [d.body for d in t.reserve_tagged("q", tag, max_messages=5)] == [b"held-1", b"held-2"]
        assert t.ack_tagged("q", [tag]) == 2
        t.ack(waiting)
        with sqlite3.connect(path) as raw:
            assert [row[0] for row in raw.execute("SELECT body FROM babelq_bodies")] == [b"delayed"]
    finally:
        t.close()

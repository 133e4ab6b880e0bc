"""consume's batch handler shape: the same outcomes as per-message handlers, a batch at a time.

The rows are classified once by the consume rules on the JVM (the session's ``spark``); each
case then runs babelq's partition function itself (:func:`consume_partition`, what a Spark task
runs) over a chosen selection of them, into a fresh SQLite sink and broker, once with
per-message handlers and once with batch handlers, and compares everything either left: the
outcome counts, the user's rows, the processed ids, the outbox (retries and dead letters with
their reasons, causes and attempts).
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from babelq.envelope import decode, make
from babelq.errors import ConfigurationError, UnavailableError
from babelq.pipelines.consume import (
    BATCH_COLUMNS,
    DONE,
    Message,
    Pipeline,
    Verdict,
    dead_letter,
    marks,
    retry,
    unavailable,
)
from babelq.pipelines.consume.partition import READ_BY, SECONDS, ConsumeConfig, consume_partition
from babelq.pipelines.consume.sinks import open_sink
from babelq.runtime.errors import PermanentError

pytestmark = [pytest.mark.spark]

CREATED = "urn:babel:orders:created"
PAID = "urn:babel:orders:paid"
QUEUE = "orders"
#: the time every row is judged at (expiry, deferral), so both shapes see the same rows
NOW = 1_900_000_000_000
ORDER = {"type": "object", "required": ["order_id"], "properties": {"order_id": {"type": "integer"}}}
BEHAVIOURS = ("ok", "raise", "refuse", "refuse_plain", "down_once")

#: the directory of the current run's "down once" markers (the handlers run in this process)
_markers: list[Path] = []
#: how the current run's handlers of PAID fail as a whole: None, "raise" or "refuse"
_explode: list[str | None] = [None]


def _setup(tx: Any) -> None:
    tx.execute("CREATE TABLE IF NOT EXISTS effects "
               "(urn TEXT, order_id BIGINT, meta_id TEXT, attempts BIGINT)")


def _down_once(meta_id: str) -> bool:
    """True the first time a message asks (its dependency is down once), False after."""
    try:
        os.close(os.open(_markers[-1] / meta_id, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _whole_batch_failure() -> Exception | None:
    if _explode[0] == "raise":
        return RuntimeError("the payments service rejected the whole call")
    if _explode[0] == "refuse":
        return PermanentError("payments are closed", cause="closed")
    return None


# -- the per-message shape -----------------------------------------------------------------------
def _one(message: Message, tx: Any) -> None:
    failure = _whole_batch_failure() if message.urn == PAID else None
    if failure is not None:
        raise failure
    order = message.data["order_id"]
    # written before any failure: a failed handler's savepoint takes it back
    tx.execute(f"INSERT INTO effects VALUES ({marks(tx, 4)})",
               (message.urn, order, message.id, message.attempts))
    behaviour = message.data["behaviour"]
    if behaviour == "raise":
        raise ValueError(f"order {order} failed")
    if behaviour == "refuse":
        raise PermanentError(f"order {order} refused", cause="blocked")
    if behaviour == "refuse_plain":
        raise PermanentError(f"order {order} refused")
    if behaviour == "down_once" and _down_once(message.id):
        raise UnavailableError("the order service is down")


MESSAGES = Pipeline(queue=QUEUE, max_attempts=3, retry_delay_ms=10)
MESSAGES.setup(_setup)
MESSAGES.handler(CREATED, schema=ORDER)(_one)
MESSAGES.handler(PAID)(_one)


# -- the batch shape -----------------------------------------------------------------------------
def _many(rows: list[dict[str, Any]], tx: Any) -> list[Verdict | None]:
    """Each row's verdict; the effects of the done rows only, written together."""
    failure = _whole_batch_failure() if rows and rows[0]["urn"] == PAID else None
    if failure is not None:
        raise failure
    verdicts: list[Verdict | None] = []
    effects = []
    for row in rows:
        data = json.loads(row["data"])
        order, behaviour = data["order_id"], data["behaviour"]
        if behaviour == "raise":
            verdicts.append(retry(ValueError(f"order {order} failed")))
        elif behaviour == "refuse":
            verdicts.append(dead_letter(PermanentError(f"order {order} refused", cause="blocked")))
        elif behaviour == "refuse_plain":
            verdicts.append(dead_letter(PermanentError(f"order {order} refused")))
        elif behaviour == "down_once" and _down_once(row["meta_id"]):
            verdicts.append(unavailable("the order service is down"))
        else:
            verdicts.append(DONE if len(verdicts) % 2 else None)
            effects.append((row["urn"], order, row["meta_id"], row["attempts"]))
    tx.executemany(f"INSERT INTO effects VALUES ({marks(tx, 4)})", effects)
    return verdicts


BATCHES = Pipeline(queue=QUEUE, max_attempts=3, retry_delay_ms=10)
BATCHES.setup(_setup)


@BATCHES.batch_handler(CREATED, schema=ORDER)
def _created(batch: Any, tx: Any) -> list[Verdict | None]:
    return _many(batch.to_pylist(), tx)


@BATCHES.batch_handler(PAID, as_pandas=True)
def _paid(frame: Any, tx: Any) -> list[Verdict | None]:
    return _many(frame.to_dict("records"), tx)


# -- the rows ------------------------------------------------------------------------------------
def _pool() -> list[bytes]:
    """Every kind of row: each behaviour of each URN at a first and a last attempt, later attempts
    of the same ids, and what the consume rules and the schema take before any handler."""
    bodies: list[bytes] = []
    n = 0
    for urn in (CREATED, PAID):
        for behaviour in BEHAVIOURS:
            n += 1
            env = make(urn, {"order_id": n, "behaviour": behaviour}, queue=QUEUE, correlation_id=f"c{n}")
            bodies += [env.encode(), env.with_attempts(1).encode(), env.with_attempts(2).encode()]
    bodies += [
        make(CREATED, {"order_id": "x", "behaviour": "ok"}, queue=QUEUE).encode(),  # breaks the schema
        make("urn:babel:orders:cancelled", {"order_id": 1}, queue=QUEUE).encode(),  # no handler
        make(CREATED, {"order_id": 90, "behaviour": "ok"}, queue=QUEUE, expire_at=NOW - 1).encode(),
        make(PAID, {"order_id": 91, "behaviour": "ok"}, queue=QUEUE, deliver_at=NOW + 60_000).encode(),
        b'{"job":"urn:babel:orders:created","trace_id":"t","data":{"order_id":92},'
        b'"meta":{"id":"sv2","schema_version":2},"attempts":0}',  # unsupported
        b"{not json",
        b"\xff\xfe not utf-8",
    ]
    return bodies


@pytest.fixture(scope="module")
def pool(spark: Any) -> Any:
    """The pool's rows as the JVM classifies them (a pyarrow Table, in the pool's order)."""
    import pyarrow as pa

    from babelq.pipelines.consume.classify import Classifier, decoded

    bodies = _pool()
    df = spark.createDataFrame([(b, 0) for b in bodies], "body binary, broker_attempts int")
    classifier = Classifier(urns=MESSAGES.urns, policy=ConsumeConfig("", QUEUE, "", MESSAGES).policy)
    table = classifier(decoded(df), NOW).toArrow()
    where = {bytes(b): i for i, b in enumerate(table.column("body").to_pylist())}
    assert len(where) == len(bodies)
    return table.take(pa.array([where[b] for b in bodies]))


def _run(pipeline: Pipeline, table: Any, rows: Sequence[int], processed: Sequence[int],
         work: Path) -> dict[str, Any]:
    """``rows`` of ``table`` through one partition of ``pipeline`` into a fresh sink (where the
    ids of the ``processed`` rows are already claimed); everything the run left."""
    import pyarrow as pa

    work.mkdir()
    (work / "markers").mkdir()
    _markers.append(work / "markers")
    sink_url = f"sqlite://{work}/sink.db"
    sink = open_sink(sink_url)
    try:
        sink.run_setup(pipeline.setups)
        ids = {table.column("id")[i].as_py() for i in processed} - {None, ""}
        with sink.transaction() as tx:
            sink.claim_ids(tx, sorted(ids), NOW)
    finally:
        sink.close()
    config = ConsumeConfig(url=f"sqlite://{work}/broker.db", queue=QUEUE, sink=sink_url, pipeline=pipeline,
                           max_attempts=pipeline.max_attempts, retry_delay_ms=pipeline.retry_delay_ms)
    picked = table.take(pa.array(list(rows), pa.int64()))
    out = list(consume_partition(iter(picked.to_batches(max_chunksize=4)), config))
    counts: dict[tuple[str, str, str], int] = {}
    for batch in out:
        for r in batch.to_pylist():
            if r["outcome"] not in (SECONDS, READ_BY):
                counts[r["urn"], r["outcome"], r["cause"]] = r["n"]
    with closing(sqlite3.connect(work / "sink.db")) as db:
        effects = sorted(db.execute("SELECT * FROM effects").fetchall())
        ids = sorted(r[0] for r in db.execute("SELECT message_id FROM babelq_processed_ids"))
        stored = db.execute("SELECT dedupe_key, queue, body, published_at FROM babelq_outbox").fetchall()
        outbox = sorted((k, q, _record(bytes(b)), p is not None) for k, q, b, p in stored)
    return {"counts": counts, "effects": effects, "ids": ids, "outbox": outbox}


def _record(body: bytes) -> str:
    """An outbox body without its one clock reading (``failed_at``)."""
    doc = orjson.loads(body)
    if isinstance(doc.get("dead_letter"), dict):
        doc["dead_letter"].pop("failed_at", None)
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS).decode()


POOL_SIZE = len(_pool())


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(st.integers(0, POOL_SIZE - 1), min_size=1, max_size=14),
    processed=st.lists(st.integers(0, POOL_SIZE - 1), max_size=3),
    explode=st.sampled_from([None, None, "raise", "refuse"]),
)
def test_batch_handlers_reach_the_per_message_outcomes_on_any_mix_of_rows(
    pool: Any, rows: list[int], processed: list[int], explode: str | None
) -> None:
    _explode[0] = explode
    with tempfile.TemporaryDirectory() as scratch:
        one = _run(MESSAGES, pool, rows, processed, Path(scratch) / "messages")
        many = _run(BATCHES, pool, rows, processed, Path(scratch) / "batches")
    assert many == one


def test_the_whole_mix_once_every_outcome_there(pool: Any, tmp_path: Path) -> None:
    """The pool in one partition (every id twice and thrice, at three attempts): every outcome
    the shapes must agree on is present, so the comparison above is not vacuous."""
    _explode[0] = None
    rows = list(range(POOL_SIZE))
    one = _run(MESSAGES, pool, rows, [0], tmp_path / "messages")
    many = _run(BATCHES, pool, rows, [0], tmp_path / "batches")
    assert many == one
    causes = {(outcome, cause) for _, outcome, cause in one["counts"]}
    assert causes >= {("handled", ""), ("retried", "handler"), ("dead_lettered", "max_attempts"),
                      ("dead_lettered", "blocked"), ("dead_lettered", "rejected"),
                      ("dead_lettered", "schema"), ("dead_lettered", "unknown_urn"),
                      ("dead_lettered", "expired"), ("deferred", ""), ("dead_lettered", "poison"),
                      ("dead_lettered", "unsupported"), ("duplicate", "already_processed")}
    dead = [json.loads(r[2]) for r in many["outbox"] if r[1] == f"{QUEUE}.dlq"]
    exhausted = [d["dead_letter"] for d in dead if d["dead_letter"].get("cause") == "max_attempts"]
    assert {(d["attempts"], d["exception"]) for d in exhausted} == {(3, "ValueError")}
    assert all(published for *_, published in many["outbox"])


# -- the batch itself, and what a batch handler's result may be -----------------------------------
def _fresh(tmp_path: Path, pipeline: Pipeline, table: Any, rows: Sequence[int]) -> dict[str, Any]:
    return _run(pipeline, table, rows, [], tmp_path / f"run-{len(list(tmp_path.iterdir()))}")


def test_the_batch_holds_the_documented_columns_in_order_arrow_or_pandas(pool: Any, tmp_path: Path) -> None:
    import pandas as pd
    import pyarrow as pa

    got: dict[str, Any] = {}
    pipeline = Pipeline(queue=QUEUE)
    pipeline.setup(_setup)

    @pipeline.batch_handler(CREATED, schema=ORDER)
    def arrow(batch: Any, tx: Any) -> None:
        got["arrow"] = batch

    @pipeline.batch_handler(PAID, as_pandas=True)
    def frame(batch: Any, tx: Any) -> None:
        got["pandas"] = batch

    # CREATED: order 1 at attempts 0, order 2 at 1; PAID: order 6 at 1, order 8 at 0
    _fresh(tmp_path, pipeline, pool, [0, 4, 16, 21])
    arrow_batch, frame_batch = got["arrow"], got["pandas"]
    assert isinstance(arrow_batch, pa.RecordBatch) and isinstance(frame_batch, pd.DataFrame)
    assert tuple(arrow_batch.schema.names) == tuple(frame_batch.columns) == BATCH_COLUMNS
    assert arrow_batch.schema.field("attempts").type == pa.int64()
    envelopes = [decode(pool.column("body")[i].as_py()) for i in (0, 4)]
    rows = arrow_batch.to_pylist()
    assert [r["attempts"] for r in rows] == [0, 1]
    assert [json.loads(r["data"]) for r in rows] == [{"order_id": 1, "behaviour": "ok"},
                                                     {"order_id": 2, "behaviour": "raise"}]
    assert {r["urn"] for r in rows} == {CREATED} and {r["queue"] for r in rows} == {QUEUE}
    assert [(r["meta_id"], r["trace_id"]) for r in rows] == [(e.id, e.trace_id) for e in envelopes]
    assert [r["correlation_id"] for r in rows] == ["c1", "c2"]
    assert frame_batch["attempts"].tolist() == [1, 0]
    assert [json.loads(d)["behaviour"] for d in frame_batch["data"]] == ["ok", "refuse"]


def test_a_malformed_result_fails_the_batch_with_a_one_line_error(pool: Any, tmp_path: Path) -> None:
    results: list[Any] = []
    pipeline = Pipeline(queue=QUEUE, max_attempts=3)
    pipeline.setup(_setup)

    @pipeline.batch_handler(CREATED)
    def wrong(batch: Any, tx: Any) -> Any:
        tx.execute("INSERT INTO effects VALUES ('written', 0, '', 0)")  # rolled back with the failure
        return results[-1]

    # orders 1 and 2 at their last attempt (2): the failure dead-letters them, naming it
    cases = {
        "returned 1 verdicts for 2 messages (one per row, in order)": [DONE],
        "row 1 is a str, not a verdict": [DONE, "done"],
        "returned a Verdict; expected a sequence of verdicts": DONE,
    }
    for why, result in cases.items():
        results.append(result)
        left = _fresh(tmp_path, pipeline, pool, [2, 5])
        assert left["counts"] == {(CREATED, "dead_lettered", "max_attempts"): 2}
        assert left["effects"] == [] and left["ids"] == []
        errors = {json.loads(r[2])["dead_letter"]["error"] for r in left["outbox"]}
        [error] = errors
        assert error.startswith(f"batch handler {CREATED!r}: ") and why in error and "\n" not in error


def test_verdicts_with_a_text_reason_name_no_exception(pool: Any, tmp_path: Path) -> None:
    pipeline = Pipeline(queue=QUEUE, max_attempts=3)
    pipeline.setup(_setup)

    @pipeline.batch_handler(CREATED)
    def texts(batch: Any, tx: Any) -> list[Verdict]:
        return [retry("stock unknown"), dead_letter("customer blocked", cause="blocked"), dead_letter("no")]

    left = _fresh(tmp_path, pipeline, pool, [0, 3, 6])  # orders 1, 2, 3 at attempts 0
    assert left["counts"] == {(CREATED, "retried", "handler"): 1, (CREATED, "dead_lettered", "blocked"): 1,
                              (CREATED, "dead_lettered", "rejected"): 1}
    docs = [json.loads(r[2]) for r in left["outbox"]]
    [again] = [d for d in docs if "dead_letter" not in d]
    assert again["attempts"] == 1
    dead = sorted((d["dead_letter"]["error"], d["dead_letter"]["cause"], d["dead_letter"].get("exception"))
                  for d in docs if "dead_letter" in d)
    assert dead == [("customer blocked", "blocked", None), ("no", "rejected", None)]


def test_a_batch_into_postgresql_commits_its_rows_with_the_ids_and_the_outbox(
    pool: Any, tmp_path: Path
) -> None:
    import uuid

    import psycopg
    import pyarrow as pa

    from conftest import require_service

    require_service("postgres")
    schema = f"consume_batch_{uuid.uuid4().hex[:10]}"
    base = "postgresql://postgres@127.0.0.1:5432/test"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        sink_url = f"{base}?options=-csearch_path%3D{schema}"
        sink = open_sink(sink_url)
        try:
            sink.run_setup(BATCHES.setups)
        finally:
            sink.close()
        config = ConsumeConfig(url=f"sqlite://{tmp_path}/broker.db", queue=QUEUE, sink=sink_url,
                               pipeline=BATCHES, max_attempts=3, retry_delay_ms=10)
        _explode[0] = None
        rows = [0, 3, 6, 15, 18, 1]  # created ok, raise, refuse; paid ok, raise; created ok again
        picked = pool.take(pa.array(rows))
        list(consume_partition(iter(picked.to_batches()), config))
        again = list(consume_partition(iter(picked.to_batches()), config))  # the batch redelivered
        counts = {(r["urn"], r["outcome"], r["cause"]): r["n"] for b in again for r in b.to_pylist()
                  if r["outcome"] not in (SECONDS, READ_BY)}
        with psycopg.connect(sink_url) as conn:
            effects = sorted(conn.execute("SELECT urn, order_id, attempts FROM effects").fetchall())
            ids = conn.execute("SELECT COUNT(*) FROM babelq_processed_ids").fetchone()[0]
            outbox = conn.execute("SELECT COUNT(*), COUNT(published_at) FROM babelq_outbox").fetchone()
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    assert effects == [(CREATED, 1, 0), (PAID, 6, 0)]  # the attempt-1 copy of order 1 found it claimed
    assert ids == 2 and outbox == (3, 3)
    dup = "duplicate"
    assert counts == {(CREATED, dup, "already_processed"): 2, (CREATED, dup, "already_settled"): 2,
                      (PAID, dup, "already_processed"): 1, (PAID, dup, "already_settled"): 1}


# -- declaring one -------------------------------------------------------------------------------
def test_declaring_a_batch_handler() -> None:
    import pickle

    pipeline = Pipeline()
    pipeline.batch_handler(CREATED, as_pandas=True)(_paid)
    assert pipeline.urns == (CREATED,) and pipeline.pandas_urns == {CREATED}
    with pytest.raises(ConfigurationError, match="already has a handler"):
        pipeline.handler(CREATED)(_one)
    pipeline.handler(PAID)(_one)
    with pytest.raises(ConfigurationError, match="already has a handler"):
        pipeline.batch_handler(PAID)(_paid)
    with pytest.raises(ConfigurationError, match="as_pandas must be a bool"):
        pipeline.batch_handler("urn:babel:orders:x", as_pandas="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="reason must be a str or an exception"):
        retry(42)  # type: ignore[arg-type]
    assert dead_letter(PermanentError("no", cause="fraud")).cause == "fraud"
    assert dead_letter(PermanentError("no", cause="fraud"), cause="mine").cause == "mine"
    assert unavailable().kind == "unavailable"
    with pytest.raises(ValueError, match="kind must be one of done, retry, dead_letter, unavailable"):
        Verdict("skip")  # type: ignore[arg-type]
    copy = pickle.loads(pickle.dumps(pipeline))
    assert copy.urns == (PAID, CREATED) and copy.pandas_urns == {CREATED}

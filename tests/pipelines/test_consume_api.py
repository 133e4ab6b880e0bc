"""The consume API without Spark: declaring a pipeline, loading it by ``MODULE:ATTR``, the sink's tables."""

from __future__ import annotations

import pickle
import sqlite3
from pathlib import Path

import pytest

from babelq.errors import ConfigurationError
from babelq.pipelines.consume import Pipeline, load_pipeline, marks
from babelq.pipelines.consume.sinks import open_sink
from babelq.pipelines.ledger import Outbound

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "orders_pipeline.py"
URN = "urn:babel:orders:created"


def test_a_pipeline_declares_handlers_schemas_and_setup_and_travels_pickled() -> None:
    pipeline = load_pipeline(f"{EXAMPLE}:pipeline")
    assert pipeline.queue == "orders" and pipeline.urns == (URN, "urn:babel:orders:paid")
    assert len(pipeline.setups) == 1 and set(pipeline.batch_handlers) == {"urn:babel:orders:paid"}
    assert pipeline.schema_errors(URN, {"order_id": 1, "amount_cents": 5, "currency": "AUD"}) == []
    assert pipeline.schema_errors(URN, {"order_id": "x", "amount_cents": 5, "currency": "AUD"}) == [
        "$.order_id: 'x' is not of type 'integer'"]
    copy = pickle.loads(pickle.dumps(pipeline))  # the compiled validator stays behind, rebuilt on use
    assert copy._registry is None and copy.schema_errors(URN, {}) != []


def test_declaration_mistakes_are_one_line_errors() -> None:
    with pytest.raises(ConfigurationError, match=r"^queue: must be a non-empty string"):
        Pipeline(queue="")
    with pytest.raises(ConfigurationError, match=r"^max_attempts: must be an integer >= 1"):
        Pipeline(max_attempts=0)
    pipeline = Pipeline()
    pipeline.handler(URN)(lambda message, tx: None)
    with pytest.raises(ConfigurationError, match="already has a handler"):
        pipeline.handler(URN)(lambda message, tx: None)
    with pytest.raises(ConfigurationError, match="invalid JSON Schema"):
        pipeline.handler("urn:babel:orders:paid", schema={"type": 5})


def test_app_specs_that_name_nothing_usable_are_refused_by_option(tmp_path: Path) -> None:
    (tmp_path / "not_a_pipeline.py").write_text("pipeline = 42\n")
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    cases = {
        f"{tmp_path}/missing.py": "no file",
        f"{tmp_path}/not_a_pipeline.py": "pipeline is a int, not a babelq.pipelines.consume.Pipeline",
        f"{tmp_path}/broken.py:pipeline": "importing '.*broken.py' failed: RuntimeError: boom",
        f"{EXAMPLE}:nope": "has no attribute 'nope'",
        "no_such_module_here:pipeline": "no module named 'no_such_module_here'",
        ":pipeline": "expected MODULE:ATTR",
    }
    for spec, why in cases.items():
        with pytest.raises(ConfigurationError, match=f"^--app '{spec}': .*{why}"):
            load_pipeline(spec)


def test_marks_follow_the_driver(tmp_path: Path) -> None:
    assert marks(sqlite3.connect(tmp_path / "x.db").cursor(), 3) == "?, ?, ?"

    class FakePsycopgCursor:
        pass

    FakePsycopgCursor.__module__ = "psycopg"
    assert marks(FakePsycopgCursor(), 2) == "%s, %s"


def test_the_sink_claims_each_id_and_outbox_key_once_and_rolls_back_a_savepoint(tmp_path: Path) -> None:
    sink = open_sink(f"sqlite://{tmp_path}/sink.db")
    try:
        with sink.transaction() as tx:
            assert sink.claim_id(tx, "m1", 1) and not sink.claim_id(tx, "m1", 1)
            with pytest.raises(ValueError), sink.savepoint():
                assert sink.claim_id(tx, "m2", 1)
                raise ValueError("the handler failed: its claim goes with it")
            row = Outbound("k1", "q.dlq", b"{}")
            assert sink.claim_outbox(tx, [row, row], 1) == {"k1"}
        assert sink.processed(["m1", "m2"]) == {"m1"}
        assert [r.key for r in sink.pending_outbox()] == ["k1"]
        sink.mark_published(["k1"])
        assert sink.counts() == (1, 1, 0)
    finally:
        sink.close()
    with pytest.raises(ConfigurationError, match=r"^--sink: unsupported URL 'mysql://h/db'"):
        open_sink("mysql://h/db")

"""Core banking in settle: the simulator unless ``--bank MODULE:ATTR`` names a posting function.

The pure tests load banks of every accepted shape and refuse the rest. The Spark tests run
:func:`~babelq.pipelines.settle.settle_frame` (what every micro-batch runs) with a bank written to
a temporary ``.py`` file: Spark's Python workers import it from the spec, its postings are
recorded in a journal file by the worker processes, and what it raises decides each message's
fate as a worker handler's exceptions do.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from babelq.envelope import decode
from babelq.errors import ConfigurationError
from babelq.pipelines.core_banking import (
    SIMULATED,
    BankSpec,
    CoreBankingError,
    CoreBankingSimulator,
    bank_post,
    describe_bank,
    is_simulated,
    parse_bank,
)
from babelq.pipelines.ledger import Posting, open_ledger
from babelq.pipelines.settle import SettleConfig
from babelq.transports import open_transport
from payment_fixtures import transfer

#: A bank as a person would write one: it records each answer in a journal file (one JSON line,
#: with the process that gave it), refuses one reference for good, times out once on another and
#: is down for a third.
BANK = '''
import json
import os

from babelq.errors import UnavailableError
from babelq.runtime import PermanentError

JOURNAL = {journal!r}


def _record(payment, what):
    line = {{"ref": payment.payment_reference, "attempts": payment.attempts, "what": what,
             "amount": payment.amount_cents, "pid": os.getpid()}}
    with open(JOURNAL, "a") as fh:
        fh.write(json.dumps(line) + "\\n")


def post(payment):
    if payment.payment_reference == "PAY-CLOSED":
        _record(payment, "refused")
        raise PermanentError("account closed at the bank", cause="account_closed")
    if payment.payment_reference == "PAY-FLAKY" and payment.attempts == 0:
        _record(payment, "timeout")
        raise TimeoutError("no answer in 5 s")
    if payment.payment_reference == "PAY-DOWN":
        raise UnavailableError("core banking is down")
    _record(payment, "posted")


class Client:
    def post(self, payment):
        post(payment)
'''


def _payment(reference: str = "PAY-1", account: str = "12345678", attempts: int = 0) -> Posting:
    return Posting("m-1", reference, 1_000, "AUD", "062-000", "11111111", "062-001", account, None, "t",
                   attempts, 0)


def _bank_file(tmp_path: Path) -> tuple[Path, Path]:
    """(the bank's .py file, its journal)."""
    journal = tmp_path / "journal.jsonl"
    bank = tmp_path / "mybank.py"
    bank.write_text(BANK.format(journal=str(journal)))
    return bank, journal


def _journal(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


# -- loading a bank (no Spark) ------------------------------------------------------------------------


def test_without_a_bank_settle_posts_through_the_simulator_and_says_so() -> None:
    post = bank_post(None)
    assert is_simulated(post)
    assert describe_bank(None).startswith(SIMULATED) and "9999" in describe_bank(None)
    post(_payment())  # accepted
    with pytest.raises(CoreBankingError, match="creditor account closed \\(simulated\\)"):
        post(_payment(account="12349999"))
    with pytest.raises(CoreBankingError, match="simulated transient"):
        post(_payment(account="12340000"))
    post(_payment(account="12340000", attempts=1))  # the transient failure passes on the retry


def test_a_bank_is_a_function_an_object_with_post_or_a_class_of_them(tmp_path: Path) -> None:
    bank, journal = _bank_file(tmp_path)
    for attr in ("post", "Client"):
        spec = parse_bank(f"{bank}:{attr}")
        assert spec.path and spec.module == str(bank.resolve())
        bank_post(spec)(_payment(f"PAY-{attr}"))
        assert describe_bank(spec) == f"core banking {bank}:{attr}"
    assert [e["ref"] for e in _journal(journal)] == ["PAY-post", "PAY-Client"]
    # the simulator named as a bank is still called simulated
    named = parse_bank("babelq.pipelines.core_banking:CoreBankingSimulator")
    assert not named.path and is_simulated(bank_post(named))
    assert describe_bank(named).startswith(SIMULATED)
    assert is_simulated(bank_post(CoreBankingSimulator()))


def test_a_relative_bank_file_is_made_absolute_for_the_executors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _bank_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    spec = parse_bank("./mybank.py:post")
    assert spec == BankSpec("./mybank.py:post", str(tmp_path / "mybank.py"), "post", True, str(tmp_path))
    assert str(spec) == "./mybank.py:post"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("nocolon", "expected MODULE:ATTR"),
        ("mybank:", "expected MODULE:ATTR"),
        ("no_such_bank_module:post", "no module named 'no_such_bank_module'"),
        ("{tmp}/missing.py:post", "no such file: {tmp}/missing.py"),
        ("{tmp}/mybank.py:nothing", "has no attribute 'nothing'"),
        ("{tmp}/mybank.py:JOURNAL", "'JOURNAL' is of type str: expected an object with a post(payment)"),
        ("{tmp}/mybank.py:_record", "post must take one argument, the payment"),
        ("{tmp}/broken.py:post", "importing {tmp}/broken.py failed: RuntimeError: no config"),
    ],
)
def test_a_bank_that_names_nothing_usable_is_a_configuration_error(
    tmp_path: Path, text: str, says: str
) -> None:
    _bank_file(tmp_path)
    (tmp_path / "broken.py").write_text('raise RuntimeError("no config")\n')
    with pytest.raises(ConfigurationError) as caught:
        bank_post(parse_bank(text.replace("{tmp}", str(tmp_path))))
    assert says.replace("{tmp}", str(tmp_path)) in str(caught.value)


# -- settling through a bank (Spark) --------------------------------------------------------------


def _run(spark: Any, config: SettleConfig, bodies: list[bytes]) -> dict[tuple[str, str], int]:
    """One micro-batch of ``bodies``, settled by two partitions as the streaming query does."""
    from babelq.pipelines.consume.classify import decoded
    from babelq.pipelines.settle import settle_frame

    df = spark.createDataFrame([(b, 0) for b in bodies], "body binary, broker_attempts int")
    return settle_frame(decoded(df), config)


def _drain(url: str, queue: str) -> list[bytes]:
    transport = open_transport(url)
    try:
        got = transport.reserve(queue, max_messages=1_000)
        transport.ack_many(got)
        return [d.body for d in got]
    finally:
        transport.close()


@pytest.mark.spark
def test_payments_are_posted_through_the_bank_its_refusals_dead_lettered_its_failures_retried(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    bank, journal = _bank_file(tmp_path)
    url = f"sqlite://{tmp_path}/q.db"
    config = SettleConfig(url=url, queue=unique_queue, ledger=str(tmp_path / "ledger.db"), retry_delay_ms=0,
                          bank=parse_bank(f"{bank}:post"))
    good = [transfer(f"PAY-{i}", unique_queue) for i in range(10)]
    closed = transfer("PAY-CLOSED", unique_queue)
    flaky = transfer("PAY-FLAKY", unique_queue)
    # 9999 would be refused by the simulator: this bank posts it
    counts = _run(spark, config, [e.encode() for e in [*good, closed, flaky]]
                  + [transfer("PAY-9999", unique_queue, creditor_account="12349999").encode()])
    assert counts == {("posted", ""): 11, ("dead_lettered", "rejected"): 1, ("retried", "core_banking"): 1}

    answers = _journal(journal)
    posted = {e["ref"] for e in answers if e["what"] == "posted"}
    assert posted == {f"PAY-{i}" for i in range(10)} | {"PAY-9999"}
    # the bank ran in Spark's Python workers, which imported it from the spec
    assert os.getpid() not in {e["pid"] for e in answers}

    [dead] = _drain(url, config.dlq)
    record = orjson.loads(dead)["dead_letter"]
    assert decode(dead).id == closed.id
    assert (record["reason"], record["cause"]) == ("failed", "account_closed")
    assert record["error"] == "core banking: account closed at the bank"
    [retry] = _drain(url, unique_queue)
    assert (decode(retry).id, decode(retry).attempts) == (flaky.id, 1)

    assert _run(spark, config, [retry]) == {("posted", ""): 1}  # the bank accepts it at attempt 1
    assert [(e["what"], e["attempts"]) for e in _journal(journal) if e["ref"] == "PAY-FLAKY"] == [
        ("timeout", 0), ("posted", 1)]
    ledger = open_ledger(config.ledger)
    try:
        assert ledger.totals() == (12, 12, 12)
    finally:
        ledger.close()


@pytest.mark.spark
def test_a_bank_that_is_down_fails_the_micro_batch_and_commits_nothing(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    bank, _ = _bank_file(tmp_path)
    url = f"sqlite://{tmp_path}/q.db"
    config = SettleConfig(url=url, queue=unique_queue, ledger=str(tmp_path / "ledger.db"),
                          bank=parse_bank(f"{bank}:post"), outage_seconds=1)
    from babelq.pipelines.consume.classify import decoded
    from babelq.pipelines.settle import settle_frame

    bodies = [transfer(f"PAY-{i}", unique_queue).encode() for i in range(4)]
    bodies.insert(2, transfer("PAY-DOWN", unique_queue).encode())
    frame = spark.createDataFrame([(b, 0) for b in bodies], "body binary, broker_attempts int")
    one_partition = frame.coalesce(1)
    # the bank's outage is waited out (briefly here), then fails the task: an outage, named
    with pytest.raises(Exception, match=r"OutageTooLongError: .*core banking is down"):
        settle_frame(decoded(one_partition), config)
    # never the message's fault: no dead letter, no retry, and the partition committed nothing
    # (a streamed micro-batch is then delivered again)
    assert _drain(url, config.dlq) == [] and _drain(url, unique_queue) == []
    ledger = open_ledger(config.ledger)
    try:
        assert ledger.totals() == (0, 0, 0)
    finally:
        ledger.close()


@pytest.mark.spark
def test_settle_names_its_bank_and_refuses_a_bad_one_before_opening_the_ledger(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    from babelq.pipelines.settle import SettleRun, SettleStats, prepare_settle

    bank, _ = _bank_file(tmp_path)
    url = f"sqlite://{tmp_path}/q.db"
    with pytest.raises(ConfigurationError, match="has no attribute 'nope'"):
        prepare_settle(spark, url=url, queue=unique_queue, ledger=tmp_path / "bad.db", bank=f"{bank}:nope")
    assert not (tmp_path / "bad.db").exists()
    prepared = prepare_settle(spark, url=url, queue=unique_queue, ledger=tmp_path / "ledger.db",
                              bank=f"{bank}:post")
    assert prepared.bank == f"core banking {bank}:post"
    assert SettleRun(SettleStats(), 0.0, True).bank.startswith(SIMULATED)  # the default


@pytest.mark.spark
def test_an_executor_without_the_bank_file_imports_the_copy_spark_shipped(spark: Any, tmp_path: Path) -> None:
    """On a cluster the driver's path of a ``--bank`` file does not exist on the executors; settle
    ships the file (``addFile``) and a Python worker imports the copy Spark fetched."""
    import uuid

    name = f"bank_{uuid.uuid4().hex[:12]}.py"  # a file name is shipped once per application
    (tmp_path / name).write_text("def post(payment):\n    return 'from the shipped copy'\n")
    spark.sparkContext.addFile(str(tmp_path / name))
    spec = parse_bank(f"{tmp_path}/not-on-this-host/{name}:post")
    posted = spark.sparkContext.parallelize([0], 1).map(lambda _: bank_post(spec)(None)).collect()
    assert posted == ["from the shipped copy"]

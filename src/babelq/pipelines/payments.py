"""The payments application, written with the consume API: each transfer posted once into the ledger.

``babelq consume --app babelq.pipelines.payments:pipeline --broker URL --sink ledger.db
--checkpoint DIR --until-drained`` runs it on queue ``payments`` (``--queue`` for another), posting
through the simulated core banking (:mod:`babelq.pipelines.core_banking`); :func:`payments_pipeline`
builds it with a bank of yours. The sink is the settlement ledger (:mod:`babelq.pipelines.ledger`):
the pipeline keeps babelq's processed ids and outbox under the ledger's own table names, and its
setup hook creates ``ledger_entries``, so :func:`~babelq.pipelines.ledger.open_ledger` and the
report read what it posted.

One batch handler (:class:`PostTransfers`) takes a partition's transfers at once. Per row:

* data breaking the transfer's JSON Schema, or not validated by ingest -> dead-lettered, cause
  ``invalid``;
* core banking (the bank's ``post``) refuses for good (:class:`~babelq.runtime.errors.PermanentError`)
  -> dead-lettered with the bank's cause (counted as ``rejected``); fails this attempt (anything
  else it raises) -> retried (counted as ``core_banking``), dead-lettered once the attempts ran
  out; is down (:class:`~babelq.errors.UnavailableError`) -> the partition's transaction is run
  again, as for any dependency;
* otherwise the posting is written to ``ledger_entries``, whose ``payment_reference`` is the
  business key: the same payment already posted under another ``meta.id`` is a duplicate
  (``already_posted``), a different payment reusing the reference is dead-lettered
  (``reference_conflict``), a posting the database refuses (PostgreSQL text cannot hold U+0000)
  is dead-lettered alone (``unpostable``);
* a message this code fails on is dead-lettered alone (``unprocessable``).

Everything else (the consume rules, copies, processed ids, the outbox, retries' backoff, the
acks) is the engine's (:mod:`babelq.pipelines.consume`). Posted messages are counted as ``posted``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from babelq.errors import UnavailableError
from babelq.pipelines import TRANSFER_URN
from babelq.pipelines.consume.api import DONE, Pipeline, Verdict, dead_letter, duplicate, retry
from babelq.pipelines.core_banking import BankChoice, bank_post, refusal_text
from babelq.pipelines.ledger import (
    PAYMENT_COLUMNS,
    REFERENCE_CONFLICT,
    UNPOSTABLE,
    Posting,
    conflict_reason,
    entries_ddl,
    unpostable_reason,
)
from babelq.pipelines.transfer_schema import obviously_valid, schema_errors
from babelq.runtime.errors import PermanentError
from babelq.urls import redact_text

#: What a posted transfer is counted as.
POSTED = "posted"
#: Causes: data the transfer's schema refuses / a refusal of the bank's (a bounded label) / a
#: failed attempt at the bank / the same payment posted before / this code failed on the message.
INVALID = "invalid"
REJECTED = "rejected"
CORE_BANKING = "core_banking"
ALREADY_POSTED = "already_posted"
UNPROCESSABLE = "unprocessable"
#: the queue the payments pipeline reads unless told otherwise (``babelq settle``'s default)
QUEUE = "payments"


def _sqlite(tx: Any) -> bool:
    return type(tx).__module__.startswith("sqlite3")


class LedgerTables:
    """The setup hook: ``<prefix>ledger_entries`` and its unique reference index, if missing."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        entries_ddl(prefix, postgres=False)  # a bad prefix fails here, not in the run

    def __call__(self, tx: Any) -> None:
        for ddl in entries_ddl(self.prefix, postgres=not _sqlite(tx)):
            tx.execute(ddl)


def _refused_errors(tx: Any) -> tuple[type[BaseException], ...]:
    """What the database raises for a value it cannot store (the posting's fault, not an outage)."""
    if _sqlite(tx):
        return (sqlite3.IntegrityError, sqlite3.DataError, sqlite3.InterfaceError, OverflowError)
    import psycopg

    return (psycopg.DataError, psycopg.IntegrityError, OverflowError)


class PostTransfers:
    """The batch handler of ``transfer.requested`` (the module docstring); holds the bank choice
    and travels to the executors with the pipeline (a ``--bank`` spec is imported there)."""

    def __init__(self, bank: BankChoice = None, prefix: str = "") -> None:
        self.bank = bank
        self.table = f"{prefix}ledger_entries"

    def __call__(self, batch: Any, tx: Any) -> list[Verdict]:
        import orjson

        n = batch.num_rows
        if n == 0:
            return []
        ids, attempts, traces, correlations, texts = (
            batch.column(name).to_pylist()
            for name in ("processed_id", "attempts", "trace_id", "correlation_id", "data"))
        now = int(batch.column("now")[0].as_py())
        post = bank_post(self.bank)
        verdicts: list[Verdict] = [DONE] * n
        postings: list[tuple[int, Posting]] = []
        for k in range(n):
            try:
                text = texts[k]
                data: Any = orjson.loads(text) if text is not None else None
                if not (obviously_valid(data) and data["validation_result"]["passed"] is True):
                    problems = schema_errors(data)  # the full validator (the quick test only accepts)
                    if not problems and data["validation_result"].get("passed") is not True:
                        problems = ["validation_result.passed is not true"]
                    if problems:
                        verdicts[k] = dead_letter("; ".join(problems), cause=INVALID)
                        continue
                posting = Posting(
                    ids[k], data["payment_reference"], data["amount_cents"], data["currency"],
                    data["debtor_bsb"], data["debtor_account"], data["creditor_bsb"],
                    data["creditor_account"], correlations[k], traces[k], attempts[k], now,
                )
                try:
                    post(posting)
                except UnavailableError:
                    raise
                except PermanentError as exc:
                    verdicts[k] = dead_letter(refusal_text(exc), cause=exc.cause or REJECTED, label=REJECTED)
                    continue
                except Exception as exc:
                    verdicts[k] = retry(refusal_text(exc), label=CORE_BANKING)
                    continue
            except UnavailableError:
                raise
            except Exception as exc:
                why = f"settle could not process this message: {type(exc).__name__}: {exc}"
                verdicts[k] = dead_letter(why, cause=UNPROCESSABLE)
                continue
            postings.append((k, posting))
        if postings:
            self._write(tx, postings, verdicts)
        return verdicts

    def _write(self, tx: Any, postings: Sequence[tuple[int, Posting]], verdicts: list[Verdict]) -> None:
        """Insert the postings (all at once, or one by one when the database refuses a value), then
        tell each one that did not go in: the same payment posted before, or a conflict."""
        refused = _refused_errors(tx)
        try:
            with _Savepoint(tx, "babelq_postings"):
                self._insert(tx, [p for _, p in postings])
        except refused:
            for k, p in postings:
                try:
                    with _Savepoint(tx, "babelq_posting"):
                        self._insert(tx, [p])
                except refused as exc:
                    first = (str(exc).splitlines() or [type(exc).__name__])[0]
                    verdicts[k] = dead_letter(unpostable_reason(redact_text(first)), cause=UNPOSTABLE)
        written = [(k, p) for k, p in postings if verdicts[k].kind == "done"]
        owners = self._owners(tx, [p.payment_reference for _, p in written])
        for k, p in written:
            row = owners.get(p.payment_reference)
            if row is not None and row[0] == p.message_id:
                continue  # posted now
            if row is not None and p.same_payment(row[1:]):
                verdicts[k] = duplicate(ALREADY_POSTED)
            else:
                verdicts[k] = dead_letter(conflict_reason(p.payment_reference), cause=REFERENCE_CONFLICT)

    def _insert(self, tx: Any, postings: Sequence[Posting]) -> None:
        marks = ", ".join(["?" if _sqlite(tx) else "%s"] * len(Posting._fields))
        tx.executemany(f"INSERT INTO {self.table} ({', '.join(Posting._fields)}) VALUES ({marks}) "
                       "ON CONFLICT (payment_reference) DO NOTHING", [tuple(p) for p in postings])

    def _owners(self, tx: Any, references: Sequence[str]) -> dict[str, tuple[Any, ...]]:
        """reference -> (message id, the :data:`~babelq.pipelines.ledger.PAYMENT_COLUMNS`) of its entry."""
        out: dict[str, tuple[Any, ...]] = {}
        mark = "?" if _sqlite(tx) else "%s"
        wanted = list(dict.fromkeys(references))
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            tx.execute(f"SELECT message_id, {', '.join(PAYMENT_COLUMNS)} FROM {self.table} "
                       f"WHERE payment_reference IN ({', '.join([mark] * len(chunk))})", chunk)
            for row in tx.fetchall():
                out[str(row[1])] = tuple(row)
        return out


class _Savepoint:
    """A savepoint of the sink's transaction, by SQL (both drivers run it as it is)."""

    def __init__(self, tx: Any, name: str) -> None:
        self.tx, self.name = tx, name

    def __enter__(self) -> None:
        self.tx.execute(f"SAVEPOINT {self.name}")

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if kind is not None:
            self.tx.execute(f"ROLLBACK TO SAVEPOINT {self.name}")
        self.tx.execute(f"RELEASE SAVEPOINT {self.name}")


def payments_pipeline(
    queue: str = QUEUE, *, bank: BankChoice = None, ledger_prefix: str = "", max_attempts: int = 3,
    retry_delay_ms: int = 1_000,
) -> Pipeline:
    """The payments pipeline reading ``queue``, posting through ``bank`` (None: the simulator; a
    :class:`~babelq.pipelines.core_banking.BankSpec`, an object with ``post`` or a function) into
    the ledger whose tables are named with ``ledger_prefix``."""
    built = Pipeline(queue, max_attempts=max_attempts, retry_delay_ms=retry_delay_ms, handled_as=POSTED,
                     prefix=ledger_prefix)
    built.setup(LedgerTables(ledger_prefix))
    built.batch_handler(TRANSFER_URN)(PostTransfers(bank, ledger_prefix))
    return built


#: The payments pipeline with the simulated core banking, for ``babelq consume --app``.
pipeline = payments_pipeline()

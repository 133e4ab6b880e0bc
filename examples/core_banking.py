"""A core banking client for ``babelq settle --bank``, in the shape a real one takes.

settle posts each payment through it instead of the simulator:

    babelq settle --broker sqlite:///var/q.db --ledger ledger.db --checkpoint ck \\
        --bank examples/core_banking.py:post

Here the "bank" is a SQLite file, ``core_banking.db`` in the directory settle runs in (on a local
master Spark's Python workers run there too; on a cluster, give a path every executor reaches, or
talk to your bank's API). What ``post`` raises tells settle what to do with the message:

* ``PermanentError``: refused for good, the message is dead-lettered now;
* ``UnavailableError``: the bank is down, not the message's fault: the work is run again later;
* anything else: this attempt failed, the message is retried, then dead-lettered.

settle may hand ``post`` a payment it already accepted (a micro-batch delivered again after a
crash): posting is idempotent on ``payment_reference``, as the ledger is.

Run it as a script to post a payment twice (once in the book) and see a closed account refused:

    python examples/core_banking.py
"""

from __future__ import annotations

import sqlite3

from babelq.errors import UnavailableError
from babelq.pipelines.ledger import Posting
from babelq.runtime import PermanentError

BOOK = "core_banking.db"
CLOSED_ACCOUNTS = frozenset({"000000000"})


def post(payment: Posting) -> None:
    """Post one payment, or say why not (see the module docstring)."""
    if payment.creditor_account in CLOSED_ACCOUNTS:
        raise PermanentError(f"creditor account {payment.creditor_account} is closed", cause="account_closed")
    try:
        book = sqlite3.connect(BOOK, timeout=30)
        try:
            with book:
                book.execute("CREATE TABLE IF NOT EXISTS postings (payment_reference TEXT PRIMARY KEY, "
                             "amount_cents INTEGER, currency TEXT, creditor TEXT)")
                # the reference is the key: a payment posted again is the same posting
                book.execute("INSERT OR IGNORE INTO postings VALUES (?, ?, ?, ?)", (
                    payment.payment_reference, payment.amount_cents, payment.currency,
                    f"{payment.creditor_bsb} {payment.creditor_account}"))
        finally:
            book.close()
    except sqlite3.OperationalError as exc:  # locked, unreachable: the bank, not the payment
        raise UnavailableError(f"core banking {BOOK}: {exc}") from exc


if __name__ == "__main__":
    payment = Posting("m-1", "PAY-1", 1_000, "AUD", "012-345", "123456789", "033-001", "987654321", None,
                      "trace-1", 0, 0)
    post(payment)
    post(payment)  # again, as after a crash: still one posting
    try:
        post(payment._replace(payment_reference="PAY-2", creditor_account="000000000"))
    except PermanentError as exc:
        print(f"refused: {exc} (cause {exc.cause})")
    with sqlite3.connect(BOOK) as book:
        print("postings:", book.execute("SELECT payment_reference, amount_cents FROM postings").fetchall())

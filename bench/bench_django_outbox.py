"""Django's outbox publish against a plain publish, per message, in the same run.

    .venv/bin/python bench/bench_django_outbox.py [--n 2000] [--rounds 3] [--postgres]

``babelq.integrations.django.publish`` in a ``transaction.atomic()`` of its own (what a view
that saves one row and announces it pays) on Django's SQLite database, and with ``--postgres``
on the local PostgreSQL ``test`` database; beside it ``App.publish`` straight to the local
Redis (DB 15) and to an SQLite broker file. Prints the best round's µs per publish (wall) and
the ratio to the plain Redis publish, beside the yardstick (seconds of a plain 10M-iteration
Python loop in this process).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from _util import yardstick

URN = "urn:babel:bench:order"


def setup_django(folder: Path, postgres: bool) -> list[str]:
    import django
    from django.conf import settings

    databases = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(folder / "shop.sqlite3")}}
    if postgres:
        databases["pg"] = {"ENGINE": "django.db.backends.postgresql", "NAME": "test", "USER": "postgres",
                           "HOST": "127.0.0.1", "PORT": "5432"}  # fmt: skip
    table = f"bench_outbox_{uuid.uuid4().hex[:8]}"
    settings.configure(
        INSTALLED_APPS=["babelq.integrations.django"], DATABASES=databases, USE_TZ=True,
        BABELQ={"QUEUE": "orders", "OUTBOX_TABLE": table},
    )  # fmt: skip
    django.setup()
    from django.db import connections

    from babelq.outbox.schema import ddl

    for alias in databases:
        connection = connections[alias]
        with connection.cursor() as cur:
            for statement in ddl(table, "sqlite" if connection.vendor == "sqlite" else "postgres"):
                cur.execute(statement)
    return list(databases)


def per_call(fn: Callable[[int], object], n: int) -> float:
    started = time.perf_counter()
    for i in range(n):
        fn(i)
    return (time.perf_counter() - started) / n


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()
    print(f"yardstick (10M-iteration loop): {yardstick():.3f} s")
    folder = Path(tempfile.mkdtemp(prefix="bench-django-"))
    aliases = setup_django(folder, args.postgres)
    from babelq.integrations.django import outbox_table, publish
    from babelq.runtime import App

    queue = f"bench-django-{uuid.uuid4().hex[:8]}"
    redis_app = App("redis://127.0.0.1:6379/15", queue=queue)
    sqlite_app = App(f"sqlite:///{folder}/broker.db", queue=queue)
    contenders: dict[str, Callable[[int], object]] = {
        "App.publish -> Redis": lambda i: redis_app.publish(URN, {"order_id": i}),
        "App.publish -> SQLite broker": lambda i: sqlite_app.publish(URN, {"order_id": i}),
    }
    for alias in aliases:
        contenders[f"django publish -> outbox ({alias})"] = (
            lambda i, using=alias: publish(URN, {"order_id": i}, using=using)
        )
    best = {name: float("inf") for name in contenders}
    for fn in contenders.values():
        per_call(fn, 200)  # warm-up
    for _ in range(args.rounds):
        for name, fn in contenders.items():
            best[name] = min(best[name], per_call(fn, args.n))
    base = best["App.publish -> Redis"]
    print(f"{args.n} publishes a round, one message each, best of {args.rounds} alternated rounds")
    for name, seconds in best.items():
        print(f"  {name:34s} {seconds * 1e6:8.1f} µs/publish  {seconds / base:5.2f}x")
    redis_app.transport.purge(queue)
    redis_app.close()
    sqlite_app.close()
    if "pg" in aliases:
        from django.db import connections

        with connections["pg"].cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {outbox_table()}")


if __name__ == "__main__":
    main()

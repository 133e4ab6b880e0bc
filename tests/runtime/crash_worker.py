"""A worker process for the crash tests (run as a script, killed by the tests).

    python crash_worker.py URL QUEUE[,QUEUE...] RECORD_FILE MODE CONCURRENCY SLEEP_S [IDEM_TABLE]

Handlers of ``urn:babel:crash:work`` sleep, then append ``meta.id`` to RECORD_FILE with one
``os.write`` (atomic for a short line with O_APPEND, and durable across a SIGKILL of this
process). ``urn:babel:crash:fail`` always raises. MODE is ``run`` (until SIGTERM) or
``drain`` (until the queue is empty, delayed retries included). With ``CRASH_HANDLERS=async``
in the environment the handlers are ``async def`` (their sleep awaited on the App's loop).
With IDEM_TABLE the handlers run behind the idempotency middleware on the PostgreSQL store
(that table, claims expiring after 1.5 s, a claimed-elsewhere message coming back after 0.2 s).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time

from babelq.runtime import App, Backoff, Message

WORK = "urn:babel:crash:work"
FAIL = "urn:babel:crash:fail"


def main() -> int:
    url, queue, record_file, mode, concurrency, sleep_s = sys.argv[1:7]
    idem_table = sys.argv[7] if len(sys.argv) > 7 else None
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(message)s")
    fd = os.open(record_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    pause = float(sleep_s)
    app = App(
        url,
        queue=queue,
        concurrency=int(concurrency),
        prefetch=2 * int(concurrency),
        max_attempts=2,
        backoff=Backoff(base_ms=50, jitter=False),
        grace_period=10.0,
        poll_timeout=0.2,
    )
    if idem_table:
        from babelq.idempotency.middleware import IdempotencyMiddleware
        from babelq.idempotency.postgres_store import PostgresStore

        dsn = "postgresql://postgres@127.0.0.1:5432/test"
        store = PostgresStore(dsn, table=idem_table, claim_ttl_ms=1_500)
        app.use(IdempotencyMiddleware(store, busy_delay_ms=200))

    if os.environ.get("CRASH_HANDLERS") == "async":

        @app.handler(WORK)
        async def work_async(message: Message) -> None:
            await asyncio.sleep(pause)
            os.write(fd, f"{message.id}\n".encode())

        @app.handler(FAIL)
        async def fail_async(message: Message) -> None:
            await asyncio.sleep(pause)
            raise RuntimeError(f"always fails ({message.attempts})")

    else:

        @app.handler(WORK)
        def work(message: Message) -> None:
            time.sleep(pause)
            os.write(fd, f"{message.id}\n".encode())

        @app.handler(FAIL)
        def fail(message: Message) -> None:
            time.sleep(pause)
            raise RuntimeError(f"always fails ({message.attempts})")

    os.write(fd, b"")
    print("ready", flush=True)
    queues = queue.split(",")  # several: one worker reads them in turn
    if mode == "run":
        app.run(queue=queues)
    else:
        app.run_until_empty(queue=queues, wait_delayed=True, timeout=60)
    app.close()
    os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())

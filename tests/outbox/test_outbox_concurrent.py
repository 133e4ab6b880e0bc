"""Several relays on one outbox table share the work and never publish the same row twice.

The relays are real ``babelq relay`` processes running side by side while producers commit rows;
every publication lands on one broker queue, where each meta.id is counted."""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import time

import pytest

from babelq.envelope import decode
from babelq.transports import open_transport

from .support import BABELQ, Target, envelopes, read_all, wait_for_start

pytestmark = [pytest.mark.live, pytest.mark.slow]

RELAYS = 3
ROWS = 3000


#: a relay stops after its batch in progress; one SQLite write may first wait out the busy timeout
STOP_WITHIN = 30.0 + 30.0


def stopped(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """The output of a SIGTERM'd relay; one that does not stop in time has its thread stacks
    (``kill -USR1``) in the failure."""
    try:
        return proc.communicate(timeout=STOP_WITHIN)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1)
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"a relay did not stop within {STOP_WITHIN:g} s of SIGTERM:\n{err}") from None


def test_concurrent_relays_publish_each_row_exactly_once(
    target: Target, broker: str, unique_queue: str
) -> None:
    args = [
        *BABELQ,
        "relay",
        "--outbox",
        target.url,
        "--broker",
        broker,
        "--table",
        target.table,
        "--publish-batch",
        "25",
        "--poll",
        "0.01",
    ]
    procs = [
        subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(RELAYS)
    ]
    try:
        for p in procs:  # every relay up, its SIGTERM handler in place, before the rows come
            wait_for_start(p)
        made = []
        for start in range(0, ROWS, 100):  # producers commit while the relays run
            batch = envelopes(100, unique_queue, start=start)
            target.add(batch, unique_queue)
            made += batch
        end = time.monotonic() + 120
        while target.statuses() != {"published": ROWS}:
            assert time.monotonic() < end, target.statuses()
            time.sleep(0.1)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        outputs = [stopped(p) for p in procs]
    totals = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outputs]

    transport = open_transport(broker)
    try:
        bodies = read_all(transport, unique_queue)
    finally:
        transport.close()
    per_row = collections.Counter(decode(b).id for b in bodies)
    assert set(per_row) == {e.id for e in made}
    assert max(per_row.values()) == 1, "a row was published by two relays"
    assert sum(t["published"] for t in totals) == ROWS
    shares = [t["published"] for t in totals]
    if target.kind == "postgres":
        assert all(share > 0 for share in shares), f"every relay took part: {shares}"
    print(f"{target.kind}: rows per relay {shares}, batches {[t['batches'] for t in totals]}")

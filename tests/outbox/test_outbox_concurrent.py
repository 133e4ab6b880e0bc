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

from .support import BABELQ, Target, envelopes, read_all

pytestmark = [pytest.mark.live, pytest.mark.slow]

RELAYS = 3
ROWS = 3000


def wait_for_start(proc: subprocess.Popen[str], within: float = 120.0) -> None:
    """Read the relay's stderr up to its start-up line (a relay signalled before it, still
    starting, would die without its summary)."""
    assert proc.stderr is not None
    end = time.monotonic() + within
    for line in proc.stderr:
        if "relay: publishing" in line:
            return
        assert time.monotonic() < end, "a relay did not start in time"
    raise AssertionError(f"a relay exited before it started (code {proc.wait()})")


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
        "--batch",
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
        outputs = [p.communicate(timeout=30) for p in procs]
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

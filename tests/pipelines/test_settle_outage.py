"""Settle waits out a Redis outage in the middle of a run, and stops in one line past ``--outage-timeout``.

The broker is reached through a TCP proxy (:class:`faults.TcpProxy`) that the test stops and
starts. A core-banking module holds the first posting of each run until the test has cut the
broker, so the outage always lands in the middle of a micro-batch, whatever the machine's load:

1. an outage that outlasts a small ``--outage-timeout``: one error line, exit 2;
2. a re-run, with an outage in the middle that the run waits out (the broker comes back once the
   run has said it is waiting): it drains the queue, and the ledger holds every payment once.

Two settle processes in all (each starts a JVM).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from babelq.envelope import dlq_name, make, now_ms
from babelq.pipelines import TRANSFER_URN
from babelq.transports import Outgoing, open_transport
from conftest import require_service
from runtime.faults import TcpProxy

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

PAYMENTS = 600

GATE_BANK = '''
import os
import time
from pathlib import Path


def post(payment):
    """Hold the first posting of the run until the test has cut the broker."""
    gate = Path(os.environ["BQ_TEST_GATE"])
    if not (gate / "go").exists():
        (gate / "started").touch()
        while not (gate / "go").exists():
            time.sleep(0.05)
'''


def _publish(url: str, queue: str) -> None:
    payment = {"amount_cents": 1000, "currency": "AUD", "debtor_bsb": "012-345",
               "debtor_account": "123456789", "creditor_bsb": "033-001", "creditor_account": "987654321",
               "validation_result": {"passed": True, "checks": ["test"]}}
    transport = open_transport(url)
    try:
        transport.publish_many(queue, [
            Outgoing(make(TRANSFER_URN, {"payment_reference": f"PAY-{i}", **payment}, queue=queue,
                          correlation_id="outage_test", expire_at=now_ms() + 3_600_000).encode())
            for i in range(PAYMENTS)
        ])
    finally:
        transport.close()


class _Run:
    """One settle process whose stderr is read as it comes, so the test can wait for a line."""

    def __init__(self, args: list[str], gate: Path, waiting_for: str) -> None:
        gate.mkdir()
        self.gate = gate
        self.lines: list[str] = []
        self.seen = threading.Event()
        self._waiting_for = waiting_for
        env = {**os.environ, "BQ_TEST_GATE": str(gate)}
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            if self._waiting_for in line:
                self.seen.set()
        self.seen.set()  # the process ended: nothing more will come

    def wait_for_first_posting(self) -> None:
        """Block until the run's first posting is held by the gate (or the run ended)."""
        while not (self.gate / "started").exists():
            if self.proc.poll() is not None:
                raise AssertionError("settle ended before its first posting:\n" + "\n".join(self.lines))
            self.seen.wait(0.1)

    def release(self) -> None:
        (self.gate / "go").touch()

    def finish(self) -> tuple[int, str, str]:
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()  # not communicate(): it would read stderr beside _read
        self.proc.wait(timeout=600)
        self._reader.join(timeout=60)
        return self.proc.returncode, out, "\n".join(self.lines)


def test_settle_waits_out_a_redis_outage_and_stops_in_one_line_past_the_bound(
    tmp_path: Path, unique_queue: str
) -> None:
    host, port = require_service("redis")
    direct = f"redis://{host}:{port}/15"
    _publish(direct, unique_queue)
    bank = tmp_path / "gate_bank.py"
    bank.write_text(GATE_BANK)
    with TcpProxy((host, port)) as proxy:
        args = [
            sys.executable, "-c", "import sys; from babelq.cli.main import main; sys.exit(main())",
            "settle", "--broker", f"redis://127.0.0.1:{proxy.port}/15", "--queue", unique_queue,
            "--ledger", str(tmp_path / "ledger.db"), "--checkpoint", str(tmp_path / "checkpoint"),
            "--micro-batch", "100", "--visibility-timeout", "5", "--progress", "none",
            "--bank", f"{bank}:post",
        ]

        # 1. the broker stays away longer than the bound: one line naming the option, exit 2
        first = _Run([*args, "--outage-timeout", "2"], tmp_path / "gate1", waiting_for="\0")
        first.wait_for_first_posting()
        proxy.stop()
        first.release()
        code, _, stderr = first.finish()
        errors = [line for line in stderr.splitlines() if line.startswith("babelq settle: error:")]
        assert code == 2, stderr[-5000:]
        assert len(errors) == 1 and "--outage-timeout" in errors[0], stderr[-5000:]
        assert stderr.rstrip().endswith(errors[0]), stderr[-5000:]

        # 2. a re-run: the broker goes away mid-batch and comes back once settle says it is waiting
        proxy.start()
        second = _Run(args, tmp_path / "gate2", waiting_for=" unavailable (attempt ")
        second.wait_for_first_posting()
        proxy.stop()
        second.release()
        second.seen.wait(timeout=600)
        proxy.start()
        code, out, stderr = second.finish()
        assert code == 0 and "drained" in out, out + stderr[-5000:]
        assert " unavailable (attempt " in stderr, stderr[-5000:]  # the outage was met, and waited out
        assert "error:" not in stderr, stderr[-5000:]

    # nothing lost, nothing doubled
    with sqlite3.connect(tmp_path / "ledger.db") as conn:
        ids = conn.execute("SELECT COUNT(*), COUNT(DISTINCT message_id) FROM processed_ids").fetchone()
        entries = conn.execute(
            "SELECT COUNT(*), COUNT(DISTINCT payment_reference) FROM ledger_entries").fetchone()
    assert ids == (PAYMENTS, PAYMENTS)
    assert entries == (PAYMENTS, PAYMENTS)
    transport = open_transport(direct)
    try:
        assert transport.size(unique_queue) == 0
        assert not transport.reserved(unique_queue)
        assert transport.size(dlq_name(unique_queue)) == 0
    finally:
        transport.close()

"""register() from several threads: Spark's own check of a new Python data source's name is not
atomic, so babelq's registrations take turns.

Spark refuses a registration as DATA_SOURCE_ALREADY_EXISTS when another thread registers the same
name between its two checks (seen in CI: the demo prepares settle in a thread while ingest
registers the source). That window is too narrow to hit on demand with a real session, so the
registry here is a stand-in for ``spark.dataSource`` that records whether two registrations ever
overlapped; it fails on the code before the lock.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

pytest.importorskip("pyspark")

from babelq.spark.datasource import BabelqDataSource, register


class OverlapRecorder:
    """A ``spark.dataSource`` stand-in: notes how many registrations run at the same time."""

    def __init__(self) -> None:
        self.inside = 0
        self.most = 0
        self.registered: list[type] = []
        self._lock = threading.Lock()

    def register(self, source: type) -> None:
        with self._lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
        time.sleep(0.02)  # Spark's check and registration take a while: long enough to overlap
        with self._lock:
            self.inside -= 1
            self.registered.append(source)


def test_registrations_from_several_threads_take_turns() -> None:
    recorder = OverlapRecorder()
    spark = SimpleNamespace(dataSource=recorder)
    start = threading.Barrier(6)

    def register_at_once() -> None:
        start.wait()
        register(spark)

    threads = [threading.Thread(target=register_at_once) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert recorder.registered == [BabelqDataSource] * 6
    assert recorder.most == 1

"""The executors' Arrow batch of their own deliveries equals the driver's path through rows."""

from __future__ import annotations

import pytest

from babelq.transports import Delivery

pytest.importorskip("pyarrow")

from babelq.spark.datasource.rows import deliveries_to_arrow, to_arrow, to_rows


def _deliveries(reconcile: bool) -> list[Delivery]:
    count = (lambda body: max(body, 4)) if reconcile else None
    return [
        Delivery(b'{"job":"a"}', "q", delivery_count=1, stored_at=10, store_host="h"),
        Delivery(bytearray(b"\xff\x00raw"), "q", delivery_count=None, stored_at=None, reconcile=count),
        Delivery(memoryview(b"{}"), "other", delivery_count=7, stored_at=2**40, store_host=None),
    ]


@pytest.mark.parametrize("reconcile", [False, True])
def test_deliveries_to_arrow_equals_the_rows_path(reconcile: bool) -> None:
    deliveries = _deliveries(reconcile)
    direct = deliveries_to_arrow(deliveries, 123, 4, "executor h:1")
    via_rows = to_arrow(to_rows(deliveries), 123, 4, "executor h:1")
    assert direct.schema == via_rows.schema
    assert direct.to_pylist() == via_rows.to_pylist()
    assert direct.column("broker_attempts").to_pylist() == ([0, 4, 0] if reconcile else [0, 0, 0])

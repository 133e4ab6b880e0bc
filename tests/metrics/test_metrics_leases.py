"""Leases lost reach the exporter (memory transport with renewal switched off)."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Sequence

import pytest

from babelq.metrics import serve
from babelq.runtime import App, Message
from babelq.transports.base import Delivery
from babelq.transports.memory import MemoryTransport

pytest.importorskip("prometheus_client")


class NoRenewal(MemoryTransport):
    """Every renewal finds its lease gone, so a slow handler loses it."""

    def renew_many(self, deliveries: Sequence[Delivery]) -> int:
        return 0


def test_leases_lost_is_exported() -> None:
    app = App(NoRenewal(visibility_timeout=0.4), queue="q", poll_timeout=0.05)
    calls: list[int] = []

    def slow(message: Message) -> None:
        calls.append(1)
        if len(calls) == 1:
            time.sleep(1.0)

    app.register("urn:babel:m:slow", slow)
    server = serve(app, 0, addr="127.0.0.1")
    app.publish("urn:babel:m:slow", {})
    app.run_until_empty(timeout=5)
    lost = app.stats()["leases_lost"]
    assert lost >= 1
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5).read().decode()
    assert f'babelq_leases_lost_total{{queue="q"}} {float(lost)}' in text
    server.close()
    app.close()

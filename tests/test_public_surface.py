"""The top package: the names a service needs, with ``import babelq`` still cheap."""

from __future__ import annotations

import subprocess
import sys

import pytest

import babelq


def test_importing_babelq_loads_neither_the_runtime_nor_a_transport() -> None:
    code = (
        "import sys, babelq; "
        "print(sorted(m for m in sys.modules if m.startswith(('babelq.runtime', 'babelq.transports'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_lazy_names_are_the_layers_own() -> None:
    from babelq.runtime import App, Message, PermanentError
    from babelq.transports import open_transport

    assert (babelq.App, babelq.Message, babelq.PermanentError) == (App, Message, PermanentError)
    assert babelq.open_transport is open_transport
    assert {"App", "open_transport", "UnavailableError"} <= set(dir(babelq)) and set(babelq.__all__) <= set(
        dir(babelq))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Ap'"):
        babelq.Ap  # noqa: B018


def test_a_worker_from_the_top_package_handles_a_message() -> None:
    app = babelq.App("memory://", queue="orders")
    seen: list[int] = []

    @app.handler("urn:babel:orders:created")
    def created(message: babelq.Message) -> None:
        seen.append(message.data["order_id"])

    app.publish("urn:babel:orders:created", {"order_id": 7})
    assert app.drain() == 1 and seen == [7]
    app.close()

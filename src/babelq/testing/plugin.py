"""The pytest fixture ``babelq_broker``: ``pytest_plugins = ["babelq.testing.plugin"]`` in a conftest.

``babelq_broker(app)`` returns a :class:`~babelq.testing.TestBroker` already entered; it is
exited (the App gets its transport back) when the test ends, pass or fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from babelq.runtime import App
from babelq.testing import TestBroker


@pytest.fixture
def babelq_broker() -> Iterator[Callable[..., TestBroker]]:
    with ExitStack() as stack:

        def start(app: App, **options: Any) -> TestBroker:
            return stack.enter_context(TestBroker(app, **options))

        yield start

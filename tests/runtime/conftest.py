"""Fixtures for the runtime tests (helpers live in runtime/support.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from babelq.runtime import App, Backoff

from .support import RecordingTransport


@pytest.fixture
def transport() -> RecordingTransport:
    return RecordingTransport(visibility_timeout=30.0)


@pytest.fixture
def make_app(transport: RecordingTransport) -> Callable[..., App]:
    """An App on the recording transport; retries without delay unless a backoff is given."""

    def build(**options: Any) -> App:
        options.setdefault("queue", "q")
        options.setdefault("backoff", Backoff(base_ms=0, jitter=False))
        return App(transport, **options)

    return build

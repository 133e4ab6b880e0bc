"""is_unavailable trusts babelq's classes and the standard library's, not a client library's.

Every transport and store translates its client's outage errors into UnavailableError where it
calls the client (tests/transports/test_outage_errors.py), so a client's own exception that still
reaches the runtime is a gap in that translation: it is reported as a possible bug (an ERROR
with its traceback) instead of passing quietly for an outage.
"""

from __future__ import annotations

import pytest

from babelq.errors import (
    AMQPConnectionError,
    PublishNotConfirmedError,
    PulsarUnavailableError,
    SQSError,
    UnavailableError,
)
from babelq.runtime.outage import is_unavailable


@pytest.mark.parametrize(
    "exc",
    [
        UnavailableError("down"),
        PublishNotConfirmedError("nacked"),
        AMQPConnectionError("lost"),
        PulsarUnavailableError("timed out"),
        ConnectionRefusedError(111, "refused"),
        TimeoutError("timed out"),
    ],
)
def test_babelq_and_standard_library_outages_are_unavailable(exc: BaseException) -> None:
    assert is_unavailable(exc)


def test_a_refusal_is_not_an_outage() -> None:
    assert not is_unavailable(SQSError("refused", code="InvalidParameterValue"))


def test_a_client_libraries_own_error_is_not_taken_for_an_outage() -> None:
    redis = pytest.importorskip("redis")
    assert not is_unavailable(redis.ConnectionError("Connection refused"))
    assert is_unavailable(UnavailableError("redis at 127.0.0.1:6379 unavailable"))

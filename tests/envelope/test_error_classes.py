"""Every error babelq raises on purpose is a BabelqError, without changing what callers catch."""

from __future__ import annotations

import pytest

from babelq.envelope import wire
from babelq.envelope.constants import MAX_DEPTH
from babelq.errors import BabelqError, UnavailableError


def test_too_deep_is_a_babelq_error_and_still_a_value_error() -> None:
    assert issubclass(wire.TooDeepError, BabelqError) and issubclass(wire.TooDeepError, ValueError)
    nested: object = 1.5  # a float: the standard encoder, which checks the depth
    for _ in range(MAX_DEPTH + 5):
        nested = [nested]
    with pytest.raises(wire.TooDeepError):
        wire.dumps(nested)


def test_a_core_banking_refusal_is_a_babelq_error_counted_as_an_attempt() -> None:
    from babelq.pipelines.core_banking import CoreBankingError

    assert issubclass(CoreBankingError, BabelqError)
    assert not issubclass(CoreBankingError, UnavailableError)  # retried, then dead-lettered

"""One error tree: every exception class babelq defines is a BabelqError (or a listed, private
hand-over), lives in babelq.errors, and has its row in docs/errors.md."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import babelq
from babelq import errors

DOCS = Path(__file__).resolve().parents[1] / "docs" / "errors.md"

#: exception classes that are deliberately no BabelqError, and why
DELIBERATE = {
    "babelq.errors.URNFormatWarning": "a warning, not an error",
    "babelq.errors.UnsafeIntegerWarning": "a warning, not an error",
    # private signals, each caught in its own module (and turned into a babelq error there)
    "babelq.envelope.payload._ProblemError": "carries a problem up a recursive walk",
    "babelq.envelope.payload._RefusedError": "a refusal inside the walk, becomes an EnvelopeError",
    "babelq.envelope.wire._UnreadableError": "the decoder's signal, becomes a DecodeError",
    "babelq.transports.url_options._RefusedError": "an option parser's signal, becomes a ConfigurationError",
    "babelq.transports.artemis._ForProton": "hands a delivery over to the proton client",
    "babelq.pipelines.ledger._DataRefusedError": "rolls a ledger transaction back",
    "babelq.conformance.idempotency_block._ThrownError": "what a conformance check's handler throws",
}


def _is_exception(value: object) -> bool:
    return inspect.isclass(value) and issubclass(value, BaseException)


def _defined() -> dict[str, type[BaseException]]:
    """Every exception class defined in a module of the package, by its dotted name."""
    for info in pkgutil.walk_packages(babelq.__path__, "babelq."):
        importlib.import_module(info.name)
    found: dict[str, type[BaseException]] = {}
    for info in [*pkgutil.walk_packages(babelq.__path__, "babelq."), None]:
        module = importlib.import_module(info.name if info else "babelq")
        for value in vars(module).values():
            if _is_exception(value) and value.__module__ == module.__name__:
                found[f"{module.__name__}.{value.__qualname__}"] = value
    return found


def _documented() -> set[str]:
    rows = [line for line in DOCS.read_text(encoding="utf-8").splitlines() if line.startswith("| ")]
    return {m.group(1) for row in rows if (m := re.match(r"\| (?:&nbsp;)*`(\w+)` \|", row))}


def test_every_exception_class_is_a_babelq_error_or_a_deliberate_exception() -> None:
    defined = _defined()
    assert len(defined) > 30  # the walk found the package's classes
    outside = {name for name, cls in defined.items() if not issubclass(cls, errors.BabelqError)}
    assert outside == set(DELIBERATE), "make these BabelqErrors, or list them with a reason"


def test_every_public_exception_class_is_defined_in_babelq_errors() -> None:
    public = {name for name in _defined() if not name.rsplit(".", 1)[1].startswith("_")}
    assert {name for name in public if not name.startswith("babelq.errors.")} == set()


def test_the_docs_table_has_a_row_for_every_class_and_no_other() -> None:
    classes = {name for name, value in vars(errors).items() if _is_exception(value)}
    assert _documented() == classes


def test_the_names_other_modules_exported_are_the_same_classes() -> None:
    from babelq.gdpr import ProtectError, UndecryptableError
    from babelq.idempotency import ClaimedElsewhereError
    from babelq.runtime import PermanentError, UnknownURNError
    from babelq.schema import SchemaViolationError
    from babelq.transports.amqp import AMQPPublishError
    from babelq.transports.amqp_client import AMQPAccessRefusedError, BrokerUnreachableError
    from babelq.transports.pulsar import PulsarError
    from babelq.transports.sqs import SQSError

    assert (PermanentError, UnknownURNError) == (errors.PermanentError, errors.UnknownURNError)
    assert (ProtectError, UndecryptableError) == (errors.ProtectError, errors.UndecryptableError)
    assert ClaimedElsewhereError is errors.ClaimedElsewhereError
    assert SchemaViolationError is errors.SchemaViolationError
    assert AMQPPublishError is errors.PublishNotConfirmedError
    assert AMQPAccessRefusedError is errors.AMQPAccessRefusedError
    assert BrokerUnreachableError is errors.BrokerUnreachableError
    assert (PulsarError, SQSError) == (errors.PulsarError, errors.SQSError)
    assert babelq.PermanentError is errors.PermanentError


def test_the_families_split_by_what_the_caller_does_next() -> None:
    e = errors
    for refusal in (e.SQSError, e.PulsarError, e.ChannelClosedByBrokerError, e.ProtocolError):
        assert issubclass(refusal, e.TransportError) and not issubclass(refusal, e.UnavailableError)
    for outage in (e.AMQPConnectionError, e.PulsarUnavailableError, e.PublishNotConfirmedError):
        assert issubclass(outage, e.UnavailableError)
    assert issubclass(e.AMQPAccessRefusedError, e.ConfigurationError)
    for bad_data in (e.SchemaViolationError, e.PayloadError, e.UndecryptableError, e.TooDeepError):
        assert issubclass(bad_data, e.DataError) and issubclass(bad_data, ValueError)

"""Every exception and warning class babelq defines, in one tree.

Every error babelq raises on purpose derives from :class:`BabelqError`, so callers can catch
one type at a boundary. Under it, a few families say what the caller should do next, and the
runtime acts on the same split:

* :class:`UnavailableError` -- a broker, store or database is down or unreachable: wait and
  try again (the runtime puts the message back without counting an attempt);
* :class:`ConfigurationError` -- a URL, option, credential or setting cannot work: fix it;
* :class:`EnvelopeError`, :class:`DecodeError`, :class:`DataError` -- the message or its data
  is bad: retrying cannot help;
* :class:`TransportError` -- a broker refused a request, or answered with something babelq
  cannot use;
* the runtime's and the pipelines' own outcomes (:class:`PermanentError`, ...).

Each transport translates its client library's exceptions into these classes where it calls
the client, so a caller never needs to know which client a transport uses. The classes live
here, below every layer, so any layer can raise them; the modules whose errors they are
(``babelq.runtime``, ``babelq.transports.sqs``, ...) export the same class objects too. Errors
about a value name the offending path (``data.items[3].price``) because that is what a person
debugging a payload needs. docs/errors.md has the whole tree in one table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

#: How many of an error's problems its one-line text lists (the rest are counted).
SHOWN_ERRORS: Final = 3


def schema_error(problems: str) -> str:
    """``problems``: ``"<JSON path>: <message>"`` texts (``$.amount: -5 is less than the minimum of 0``)."""
    return f"schema: {problems}"


def _shown(errors: Sequence[str]) -> str:
    shown = "; ".join(errors[:SHOWN_ERRORS])
    if len(errors) > SHOWN_ERRORS:
        shown += f" (and {len(errors) - SHOWN_ERRORS} more)"
    return shown


class BabelqError(Exception):
    """Base class of every error babelq raises on purpose."""


# -- the message is bad ---------------------------------------------------------------------------
class EnvelopeError(BabelqError, ValueError):
    """An envelope (or a value meant for one) breaks the contract.

    ``path`` is the dotted location of the offending value (``data.items[3].price``), or
    ``""`` when the problem is the envelope as a whole.
    """

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}" if path else problem)


class URNError(EnvelopeError):
    """A URN is empty, or breaks the naming rules while strict mode is on."""


class DecodeError(BabelqError, ValueError):
    """Bytes could not be read as an envelope document (not UTF-8, not JSON, not an object).

    Such a body is *poison*: it is never handed to a handler; the runtime dead-letters it
    with its original bytes preserved (see :func:`babelq.envelope.poison_record`).
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class DataError(BabelqError, ValueError):
    """A message's data cannot be used as it is: retrying the same data cannot help."""


class TooDeepError(DataError):
    """A document nested deeper than the envelope's limit was about to be written."""


class PayloadError(DataError):
    """``data`` does not fit the handler's payload type; ``errors`` are ``"<JSON path>: <problem>"``."""

    def __init__(self, type_name: str, errors: list[str]) -> None:
        self.type_name = type_name
        self.errors = errors
        super().__init__(schema_error(f"{_shown(errors)} (as {type_name})"))


class SchemaViolationError(DataError):
    """``data`` breaks the JSON Schema registered for ``urn``.

    ``errors`` are all the ``"<JSON path>: <message>"`` texts; the exception's own text is one
    line, ``schema: <the first few>`` (prefixed by ``refused``, e.g. ``refused to publish <urn> to
    'orders'``, on the publish side). It becomes ``dead_letter.error`` on the consume side, and
    ``dead_letter.exception`` is ``SchemaViolationError``.
    """

    def __init__(self, urn: str, errors: Sequence[str], *, refused: str = "") -> None:
        self.urn = urn
        self.errors = list(errors)
        text = schema_error(_shown(self.errors))
        super().__init__(f"{refused}: {text}" if refused else text)


class UndecryptableError(DataError):
    """A protected field cannot be opened with any known key (wrong key, tampered, not a ciphertext).

    The message's fault, not the infrastructure's: retrying cannot fix it, so the consume
    middleware dead-letters it. ``field`` is the path of the value inside ``data``
    (``addresses[1].line``); the message never contains the value or key bytes.
    """

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"data.{field}: {problem}")


class ProtectError(DataError):
    """A marked value cannot be protected (it is not JSON, e.g. NaN); the publish is refused."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"data.{field}: {problem}")


# -- the setting is wrong -------------------------------------------------------------------------
class ConfigurationError(BabelqError, ValueError):
    """A URL, option, credential or setting given to babelq is not usable (names the option)."""


class UnsupportedSchemaError(ConfigurationError):
    """A schema uses a keyword (or a keyword value) a babelq schema compiler does not support.

    ``keyword`` is the keyword, ``location`` its JSON pointer in the schema (``#/properties/a``).
    """

    def __init__(self, keyword: str, location: str, problem: str) -> None:
        self.keyword = keyword
        self.location = location
        super().__init__(f"JSON Schema keyword {keyword!r} at {location}: {problem}")


# -- something the message depends on is down ------------------------------------------------------
class UnavailableError(BabelqError):
    """Infrastructure a message depends on (a broker, a store, a database) failed or is unreachable.

    Never the message's fault: the runtime puts such a message back, unchanged and without
    counting an attempt, instead of retrying it towards the dead-letter queue. Stores and
    transports raise it for connection-level failures (their driver's error is the
    ``__cause__``); a handler may raise it to say "put this back, my dependency is down".
    Its text never holds a password (URLs in it are redacted).
    """


class OutageTooLongError(UnavailableError):
    """An outage outlasted the command's ``--outage-timeout``: the command stops cleanly, and a
    re-run continues where it stopped (nothing it committed is redone, nothing it held is lost)."""


class PublishNotConfirmedError(UnavailableError):
    """The broker did not confirm that it stored a published message.

    It refused the write (a nack, a rejected or released outcome, a failed delivery report, a
    returned unroutable message) or no confirmation came in time. Either way it is the broker's
    failure, never the message's: on every transport this is an :class:`UnavailableError`, so
    the runtime puts the message being handled back instead of counting an attempt. Part of a
    batch may have been stored (at-least-once).
    """


class RateLimitedError(UnavailableError):
    """The URN's rate limit would have kept the handler waiting too long: the message is put back."""


# -- a broker said no ------------------------------------------------------------------------------
class TransportError(BabelqError):
    """A broker refused a request, or answered with something babelq cannot use.

    Neither an outage (:class:`UnavailableError`) nor a setting (:class:`ConfigurationError`):
    the runtime counts it as a failed attempt. The broker's own answer is in the text.
    """


class ProtocolError(TransportError):
    """Bytes that are not valid AMQP 0-9-1 (or a value that cannot be encoded)."""


class AMQPError(TransportError):
    """Base of the AMQP 0-9-1 client's errors."""


class AMQPConnectionError(AMQPError, UnavailableError):
    """The connection is gone or could not be made (socket error, missed heartbeats, closed by the
    broker or by us).

    An :class:`UnavailableError`: the broker or the network failed, not a message, so the
    runtime puts the message back instead of counting an attempt.
    """


class ConnectionClosedByBrokerError(AMQPConnectionError):
    """The broker sent ``Connection.Close``: ``reply_code`` and ``reply_text`` say why."""

    def __init__(self, reply_code: int, reply_text: str) -> None:
        super().__init__(f"connection closed by broker: {reply_code} {reply_text}")
        self.reply_code = reply_code
        self.reply_text = reply_text


class BrokerUnreachableError(AMQPConnectionError):
    """No connection could be made (refused, timed out, handshake failed) after
    ``connection_attempts`` tries; the text names the URL with its password masked."""


class AMQPAccessRefusedError(AMQPError, ConfigurationError):
    """The broker refused the login (403 ACCESS_REFUSED) or the vhost (530 NOT_ALLOWED) during the
    handshake.

    A :class:`ConfigurationError`, not an unavailable broker: connecting again with the same
    credentials cannot succeed, so nothing retries it. ``reply_text`` must come redacted (the
    client passes the broker's text through :func:`babelq.urls.redact_text`).
    """

    def __init__(self, where: str, reply_code: int, reply_text: str) -> None:
        super().__init__(
            f"{where}: the broker refused the connection: {reply_code} {reply_text} "
            "(check the user name, password and vhost)"
        )
        self.reply_code = reply_code
        self.reply_text = reply_text


class ChannelClosedByBrokerError(AMQPError):
    """The broker sent ``Channel.Close`` (e.g. 404 NOT_FOUND, 406 PRECONDITION_FAILED)."""

    def __init__(self, reply_code: int, reply_text: str) -> None:
        super().__init__(f"channel closed by broker: {reply_code} {reply_text}")
        self.reply_code = reply_code
        self.reply_text = reply_text


class ChannelStateError(AMQPError):
    """An operation on a channel that is already closed."""


class SQSError(TransportError):
    """SQS refused a request or part of a batch, or a body cannot be carried by SQS.

    ``code`` is the error code SQS answered with (``""`` when the refusal is babelq's own).
    """

    def __init__(self, message: str, *, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class PulsarError(TransportError):
    """The broker or its admin API refused a request."""


class PulsarUnavailableError(PulsarError, UnavailableError):
    """The Pulsar broker or its admin API could not be reached or timed out."""


# -- a handler's and the runtime's own outcomes -----------------------------------------------------
class PermanentError(BabelqError):
    """Raise from a handler to dead-letter the message now (reason ``failed``), without retries.

    For messages that can never succeed (a business rule says no, the payload is invalid):
    retrying them only delays the inevitable. ``cause`` lands in the ``dead_letter`` block.
    """

    def __init__(self, error: str, *, cause: str | None = None) -> None:
        self.cause = cause
        super().__init__(error)


class UnknownURNError(BabelqError):
    """No handler is mapped for a message's URN (the ``fail`` unknown-URN strategy raises this)."""

    def __init__(self, urn: str) -> None:
        self.urn = urn
        super().__init__(f"no handler is registered for URN {urn!r}")


class HandlerTimeoutError(BabelqError, TimeoutError):
    """An ``async def`` handler ran longer than its ``timeout``: the run was cancelled and counts
    as a failed attempt."""


class ClaimedElsewhereError(BabelqError):
    """Another consumer holds the claim on this id and has not finished: retry later."""

    def __init__(self, message_id: str) -> None:
        self.message_id = message_id
        super().__init__(f"message {message_id!r} is being handled by another consumer; retry later")


# -- the pipelines and tools ---------------------------------------------------------------------
class CoreBankingError(BabelqError):
    """A transfer core banking did not accept this time (the message is retried, then dead-lettered)."""


class ExportError(BabelqError):
    """Chromium was found but did not produce the export (one line: what it said)."""


class InjectedCrashError(BabelqError):
    """Raised by the test hook ``fail_after_batches`` to kill a query mid-run."""


class SuiteError(BabelqError):
    """A file a conformance suite's manifest names is missing or unreadable (a failing check)."""


# -- warnings ------------------------------------------------------------------------------------
class URNFormatWarning(UserWarning):
    """A URN does not follow ``urn:babel:<context>:<event>`` (raised instead in strict mode)."""


class UnsafeIntegerWarning(UserWarning):
    """An integer above 2**53-1 will lose precision in JavaScript consumers; send it as a string."""

"""The library's exception and warning types.

Every error babelq raises on bad input derives from :class:`BabelqError`, so callers can
catch one type at a boundary. Errors about a value name the offending path
(``data.items[3].price``) because that is what a person debugging a payload needs.
"""

from __future__ import annotations


class BabelqError(Exception):
    """Base class of every error babelq raises on purpose."""


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


class ConfigurationError(BabelqError, ValueError):
    """A URL, option or setting given to babelq is not usable (names the option)."""


class URNFormatWarning(UserWarning):
    """A URN does not follow ``urn:babel:<context>:<event>`` (raised instead in strict mode)."""


class UnsafeIntegerWarning(UserWarning):
    """An integer above 2**53-1 will lose precision in JavaScript consumers; send it as a string."""


class UnavailableError(BabelqError):
    """Infrastructure a message depends on (a broker, a store, a database) failed or is unreachable.

    Never the message's fault: the runtime puts such a message back, unchanged and without
    counting an attempt, instead of retrying it towards the dead-letter queue. Stores and
    transports raise it for connection-level failures (their driver's error is the
    ``__cause__``); a handler may raise it to say "put this back, my dependency is down".
    Its text never holds a password (URLs in it are redacted).
    """


class PublishNotConfirmedError(UnavailableError):
    """The broker did not confirm that it stored a published message.

    It refused the write (a nack, a rejected or released outcome, a failed delivery report, a
    returned unroutable message) or no confirmation came in time. Either way it is the broker's
    failure, never the message's: on every transport this is an :class:`UnavailableError`, so
    the runtime puts the message being handled back instead of counting an attempt. Part of a
    batch may have been stored (at-least-once).
    """

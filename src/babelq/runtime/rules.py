"""The consume rules, once: what a babelq consumer decides before a handler runs, in which order,
under which names, and how a failed attempt is retried.

Two consumers apply them. The worker runtime does, per message in Python
(:mod:`babelq.runtime.pipeline` and the built-in middleware call the functions here), and so
does the payments pipeline's ``settle``, per micro-batch as Spark expressions
(:mod:`babelq.pipelines.consume.classify` builds one ``CASE WHEN`` from :data:`ORDER`, a branch per
rule, and asks :class:`RetryPolicy` the same questions). Two copies of the rules would drift
apart (a cause named in one and not the other, a different backoff, checks in another order), so
the names, the order and the retry policy live here, below both;
``tests/pipelines/test_settle_rules_agree.py`` feeds the same bodies to both and compares the
outcomes.

The rules, in order (the first that applies decides):

==================  ================================================  ===========================
rule (cause/label)  applies when                                      what happens
==================  ================================================  ===========================
``poison``          the bytes are not an envelope (not UTF-8, not      dead letter, reason
                    JSON, not an object)                               ``poison``, no cause; the
                                                                       original bytes kept
``unsupported``     an envelope the consumer rules reject (no URN,     dead letter, reason
                    ``schema_version`` other than 1, ...)              ``poison``, cause
                                                                       ``unsupported``
``expired``         ``meta.expire_at`` has passed (``now >=            dead letter, reason
                    expire_at``)                                       ``failed``, cause
                                                                       ``expired``
``deferred``        ``meta.deliver_at`` is still ahead                 put back unchanged for the
                                                                       remaining delay (capped)
``unknown_urn``     no handler for the URN                             the unknown-URN strategy;
                                                                       ``dead_letter``: reason and
                                                                       cause ``unknown_urn``
==================  ================================================  ===========================

Then the handler runs (in the runtime: the URN's feature middleware, e.g. idempotency, around
it; in settle: copies and processed ids, the JSON Schema, core banking). A failed run is retried
with the attempts raised by one after the :class:`RetryPolicy`'s jittered backoff, until
``max_attempts`` runs failed; then it is dead-lettered with reason ``failed`` and the failure's
own cause, or ``max_attempts`` when it has none.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from babelq.envelope.constants import INT64_MAX
from babelq.errors import ConfigurationError
from babelq.errors import schema_error as schema_error
from babelq.runtime.backoff import Backoff

# dead_letter.reason values (the standard's three)
REASON_POISON = "poison"
REASON_FAILED = "failed"
REASON_UNKNOWN_URN = "unknown_urn"

# the rules' names: each is the counter label of its outcome and, where it has one, the cause
POISON = "poison"
UNSUPPORTED = "unsupported"
EXPIRED = "expired"
DEFERRED = "deferred"
UNKNOWN_URN = "unknown_urn"
#: the cause of a message dead-lettered because its attempts ran out and its failure named none
MAX_ATTEMPTS = "max_attempts"
#: the cause of a message whose ``data`` breaks its URN's JSON Schema (:mod:`babelq.schema.middleware`):
#: dead-lettered at once with reason ``failed``, never retried (the same data fails every time). Not a
#: rule of :data:`ORDER`: like settle's JSON Schema check (whose wider cause ``invalid`` also covers
#: ingest's validation verdict) it runs in the handler's stage, after the rules.
SCHEMA = "schema"

#: The longest a message is put back for (SQS's cap on a native delay, 15 minutes); a message
#: deferred for longer comes back and is deferred again.
MAX_DELAY_MS = 900_000


@dataclass(frozen=True, slots=True)
class Rule:
    """One check made before the handler: its name, and what a message it applies to becomes."""

    name: str
    action: Literal["dead_letter", "release"]
    reason: str | None  #: dead_letter.reason (None for a release)
    cause: str | None  #: dead_letter.cause (None: the record carries none)


#: The checks, in the order both consumers make them. Add one here and both must implement it:
#: the runtime's pipeline and settle's Spark classification each refuse to start with a rule
#: they have no step for.
ORDER: tuple[Rule, ...] = (
    Rule(POISON, "dead_letter", REASON_POISON, None),
    Rule(UNSUPPORTED, "dead_letter", REASON_POISON, UNSUPPORTED),
    Rule(EXPIRED, "dead_letter", REASON_FAILED, EXPIRED),
    Rule(DEFERRED, "release", None, None),
    Rule(UNKNOWN_URN, "dead_letter", REASON_UNKNOWN_URN, UNKNOWN_URN),
)
RULES: dict[str, Rule] = {rule.name: rule for rule in ORDER}


def check_implemented(side: str, names: Iterable[str]) -> None:
    """Raise unless ``names`` (a consumer's steps) are exactly the rules of :data:`ORDER`."""
    have = set(names)
    want = set(RULES)
    if have != want:
        raise ConfigurationError(
            f"{side} implements the consume rules {sorted(have)}, but babelq.runtime.rules has {sorted(want)}"
        )


# -- the rules' tests, on plain values (the Spark side writes the same comparisons as columns) ------
def is_expired(expire_at: int | None, now_ms: int) -> bool:
    """``meta.expire_at`` has passed: the message is stale the very millisecond it is reached."""
    return expire_at is not None and now_ms >= expire_at


def deferred_ms(deliver_at: int | None, now_ms: int) -> int:
    """How long a message must still wait for its ``meta.deliver_at`` (0: not early)."""
    if deliver_at is None or deliver_at <= now_ms:
        return 0
    return deliver_at - now_ms


# -- the error texts of the dead letters, so that both consumers write the same words ------------
def unsupported_error(problem: str) -> str:
    return f"rejected by the consumer rules: {problem}"


def expired_error(expire_at: int, now_ms: int) -> str:
    return f"expired: meta.expire_at {expire_at} passed {now_ms - expire_at} ms before handling"


def unknown_urn_error(urn: str) -> str:
    return f"no handler is registered for URN {urn!r}"


# schema_error (imported above) lives beside the errors whose text it makes, in babelq.errors


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """What a failed handler run leads to: another attempt after a backoff, or the DLQ.

    ``max_attempts`` counts handler runs. After a run of a message whose (reconciled) attempts
    were ``n`` fails, the run count is ``max(n, 0) + 1``; below ``max_attempts`` (and within
    signed 64-bit, the most the standard lets ``attempts`` hold) the message is retried with
    that count after :meth:`delay_ms`, otherwise it is dead-lettered.
    """

    max_attempts: int = 3
    backoff: Backoff = field(default_factory=Backoff)

    def __post_init__(self) -> None:
        if type(self.max_attempts) is not int or self.max_attempts < 1:
            raise ConfigurationError(f"max_attempts: must be an integer >= 1, got {self.max_attempts!r}")

    @staticmethod
    def runs(attempts: int) -> int:
        """The run count after a failed run of a message at ``attempts`` (a negative count, a
        foreign producer's, counts as 0)."""
        return max(attempts, 0) + 1

    def retries(self, attempts: int) -> bool:
        """Whether a failed run of a message at ``attempts`` is retried (else dead-lettered)."""
        runs = self.runs(attempts)
        return runs < self.max_attempts and runs <= INT64_MAX

    @property
    def last_retried_attempts(self) -> int:
        """The highest attempts whose failure is still retried (-1: none is): the Spark side
        compares with it instead of adding 1, which could overflow a long."""
        return min(self.max_attempts - 2, INT64_MAX - 1)

    def delay_ms(self, runs: int) -> int:
        """The wait before the next attempt after ``runs`` failed runs: full jitter below the
        backoff's ceiling, so a batch of failures spreads its retries out."""
        return self.backoff.delay_ms(runs)

    @staticmethod
    def exhausted_cause(cause: str | None) -> str:
        """The dead letter's cause once the attempts ran out: the failure's own, else ``max_attempts``."""
        return cause or MAX_ATTEMPTS

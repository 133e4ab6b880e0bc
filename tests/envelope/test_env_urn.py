"""URN naming rules (docs/standard.md §3): warn by default, refuse in strict mode."""

from __future__ import annotations

import warnings

import pytest

from babelq.envelope import check_urn, decode, make, urn_problem
from babelq.errors import URNError, URNFormatWarning

GOOD = [
    "urn:babel:orders:created",
    "urn:babel:orders:invoice.requested",
    "urn:babel:bulk-files:batch.file_received",
    "urn:babel:payments:payment.settled.v2",
    "urn:babel:k8s:pod.evicted",
    "urn:babel:orders:line-item.added",
]

BAD = [
    ("urn:babel:Orders:created", "may only use [a-z0-9:._-]"),
    ("urn:babel:orders:InvoiceRequested", "may only use"),
    ("App\\Jobs\\SendInvoice", "never a class name"),
    ("orders.created", "must start with 'urn:babel:'"),
    ("urn:acme:orders:created", "must start with 'urn:babel:'"),
    ("urn:babel:orders", "must look like urn:babel:<context>:<event>"),
    ("urn:babel:orders:", "must look like"),
    ("urn:babel::created", "must look like"),
    ("urn:babel:orders:invoice..requested", "must look like"),
    ("urn:babel:orders:created.", "must look like"),
    ("urn:babel:orders: created", "may only use"),  # inner whitespace stays (ASCII is trimmed at the ends)
    ("urn:babel:orders:created\u00a0", "must be ASCII"),  # a Unicode space is never trimmed
    ("urn:babel:order_s:created", "must look like"),
    ("urn:babel:orders:créé", "must be ASCII"),
    ("urn:babel:orders:order.1042", "must not carry payload ids"),
    ("urn:babel:orders:1042:created", "must not carry payload ids"),
    ("urn:babel:orders:f1e2d3c4-b5a6-4789-90ab-cdef01234567", "must not carry payload ids"),
]


@pytest.mark.parametrize("urn", GOOD)
def test_good_urns_pass_quietly_even_in_strict_mode(urn: str) -> None:
    assert urn_problem(urn) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_urn(urn, strict=True)
        assert make(urn, {}).urn == urn
        assert make(urn, {}, strict=True).urn == urn


@pytest.mark.parametrize(("urn", "problem"), BAD)
def test_bad_urns_warn_by_default(urn: str, problem: str) -> None:
    assert problem in (urn_problem(urn) or "")
    with pytest.warns(URNFormatWarning, match=problem.replace("[", r"\[").replace(".", r"\.")) as caught:
        env = make(urn, {"a": 1})
    assert caught[0].filename == __file__  # the warning points at the producer's line
    assert env.urn == urn and decode(env.encode()).urn == urn  # still produced, unchanged


@pytest.mark.parametrize(("urn", "problem"), BAD)
def test_bad_urns_raise_in_strict_mode(urn: str, problem: str) -> None:
    with pytest.raises(URNError) as info:
        make(urn, {"a": 1}, strict=True)
    assert info.value.path == "job"
    assert problem in info.value.problem and repr(urn) in info.value.problem
    with pytest.raises(URNError):
        check_urn(urn, strict=True)


@pytest.mark.parametrize(
    "urn", [" urn:babel:orders:created", "urn:babel:orders:created\r\n", "\turn:babel:orders:created\x0c"]
)
def test_ascii_whitespace_around_a_urn_is_trimmed_quietly(urn: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert make(urn, {}, strict=True).urn == "urn:babel:orders:created"


def test_a_bad_urn_keeps_warning_on_every_use() -> None:
    """The known-good cache must never learn a bad URN."""
    for _ in range(3):
        with pytest.warns(URNFormatWarning):
            check_urn("urn:babel:Orders:created")


def _identity_body(**members: str) -> bytes:
    """An accepted frame with ``job``/``urn`` as given (JSON text); a member given as "" is left out."""
    parts = {"trace_id": '"t"', "data": '{"n":1}', "meta": '{"schema_version":1}', "attempts": "0"}
    named = {key: value for key, value in members.items() if value}
    return ("{" + ",".join(f'"{k}":{v}' for k, v in {**named, **parts}.items()) + "}").encode()


ALIAS = '"urn:babel:orders:created"'
#: (job, urn, the URN a consumer reads or "" when it must reject the message)
IDENTITY_CASES = [
    ('"urn:babel:a:b"', ALIAS, "urn:babel:a:b"),
    ("", ALIAS, "urn:babel:orders:created"),
    ("null", ALIAS, "urn:babel:orders:created"),
    ("5", ALIAS, ""),
    ('""', ALIAS, ""),
    ('" \\t"', ALIAS, ""),
    ("[]", ALIAS, ""),
    ("true", "", ""),
    ("", "", ""),
    ("null", "", ""),
    ("", "7", ""),
]


@pytest.mark.parametrize(("job", "urn", "expected"), IDENTITY_CASES)
def test_the_urn_alias_counts_only_when_job_is_absent(job: str, urn: str, expected: str) -> None:
    """Seed 004, consumer rules: "Read the URN from job, accepting urn as an alias if job is
    absent." A ``job`` that is present but not a non-empty string is no URN, whatever ``urn``
    holds (null counts as absent, as for every other optional member)."""
    from babelq.envelope import decode
    from babelq.envelope.verdict import JOB_NOT_A_URN, NO_URN

    env = decode(_identity_body(job=job, urn=urn))
    assert env.urn == expected
    assert env.accepts() is bool(expected)
    if expected:
        assert env.rejection() is None
    else:
        assert env.rejection() == (JOB_NOT_A_URN if job not in ("", "null") else NO_URN)

"""Tests and benches never write to Redis DB 0, the database a user's own data most likely
sits in: every Redis URL or client they aim at this machine's Redis names another database."""

from __future__ import annotations

import re

import pytest

from conftest import ROOT

#: a Redis URL on this machine: host 127.0.0.1, localhost or an f-string placeholder
_URL = re.compile(
    r"rediss?://(?:[^@\s\"'/]*@)?(?:127\.0\.0\.1|localhost|\{[^}]*\})"
    r"(?::(?P<port>\d+|\{[^}]*\}))?(?P<path>/[^\s\"'?]*)?"
)
#: a client built from host and port rather than a URL
_CLIENT = re.compile(r"Redis\((?P<args>[^)]*\bport=(?:6379|port)\b[^)]*)\)")


def db_zero_uses(text: str) -> list[str]:
    """The Redis URLs and clients in ``text`` that would use DB 0 of the machine's Redis. A URL
    on another fixed port (nothing listens there, or a throwaway server) is not one."""
    found = []
    for match in _URL.finditer(text):
        port, path = match["port"], match["path"]
        if port is not None and port.isdigit() and port != "6379":
            continue
        db = re.match(r"\d*", (path or "/")[1:])
        if path is None or path == "/" or (db is not None and db.group() == "0"):
            found.append(match.group())
    found += [m.group() for m in _CLIENT.finditer(text) if "db=" not in m["args"]]
    return found


@pytest.mark.parametrize(
    ("text", "flagged"),
    [
        ('"redis://127.0.0.1:6379/0"', True),
        ('"redis://127.0.0.1:6379"', True),
        ('f"redis://{host}:{port}/0?laravel=1"', True),
        ('f"redis://:{SECRET}@localhost/0{query}"', True),
        ("redis.Redis(host=host, port=port)", True),
        ('"redis://127.0.0.1:6379/15"', False),
        ('f"redis://{host}:{port}/15{query}"', False),
        ('"redis://127.0.0.1:1/0"', False),  # nothing listens on port 1
        ('"redis://h:6379/0"', False),  # parsed, never contacted
        ('redis.Redis(host="127.0.0.1", port=6379, db=15)', False),
    ],
)
def test_the_scan_tells_db_zero_from_others(text: str, flagged: bool) -> None:
    assert bool(db_zero_uses(text)) is flagged


def test_no_test_or_bench_uses_redis_db_zero() -> None:
    sources = sorted((ROOT / "tests").rglob("*.py")) + sorted((ROOT / "bench").rglob("*.py"))
    assert len(sources) > 50
    here = __file__
    offenders = {
        str(path.relative_to(ROOT)): uses
        for path in sources
        if str(path) != here and (uses := db_zero_uses(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}

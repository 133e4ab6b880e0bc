"""Showing URLs without their secrets.

Broker and database URLs carry passwords (``redis://:s3cret@host``, ``amqp://user:pw@host``,
``postgresql://app:pw@db/ledger?password=...``) and every place that shows one to a person
(an error, a log line, the demo's report) must show it redacted. Two entry points:

* :func:`redact` for one URL you hold;
* :func:`redact_text` for free text that may quote URLs (an exception from a client library,
  a traceback line), so an error can be passed through without leaking what it quotes.

:func:`one_line` builds on them: an error (or a value quoted in one) as a single line.

Both keep everything a person needs to recognise the target (scheme, user, host, port, path)
and replace only the secret with ``***``.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from urllib.parse import SplitResult, parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from babelq.errors import ConfigurationError, UnavailableError

#: Query parameters that hold secrets (lower-case), redacted by value. The transports' secret
#: options are here too (Kafka's SASL password, Service Bus keys, AWS session tokens), so one
#: function shows every transport URL.
SECRET_PARAMETERS = frozenset(
    {
        "password", "pass", "passwd", "pwd", "secret", "token", "access_token", "sas", "sig",
        "signature", "sharedaccesskey", "aws_secret_access_key", "secret_access_key", "api_key",
        "apikey", "key", "sslpassword", "sasl_password", "ssl_key_password", "aws_session_token",
        "connection_string", "shared_access_key", "sas_token",
    }
)
MASK = "***"

# a URL scheme (RFC 3986: a letter, then letters, digits, "+", "." or "-")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")
# scheme://[user[:password]@]host... up to whitespace, a quote or a closing bracket
_URL_IN_TEXT = re.compile(rf"""\b{_SCHEME.pattern}://[^\s'"<>)\]]+""")
# "user:password@" with no scheme before it: what is left of a URL read as a path (a sqlite URL
# with one slash, a URL without its scheme), which an error quoting the path would print as is
_BARE_USERINFO = re.compile(r"""(?<![\w.~%+\-])([\w.~%+\-]*):([^\s:/@'"<>()\[\]]+)@""")
# key=value secrets in free text such as libpq's "password=xyz" connection strings
_KEYWORD_SECRET = re.compile(
    r"""(?i)\b(password|passwd|pwd|secret|token|sslpassword)\s*=\s*('[^']*'|"[^"]*"|[^\s'"]+)"""
)


def split_url(url: str) -> SplitResult:
    """``urlsplit(url)``, except that a netloc listing several hosts is kept as written.

    Kafka and Pulsar URLs name every bootstrap broker (``kafka://b1:9092,[::1]:9093``). Python's
    own ``urlsplit`` judges such a netloc as one host, and some 3.11 patch releases (3.11.2 among
    them) refuse it with "Invalid IPv6 URL" when a bracketed IPv6 address is not its first
    host. The project supports every 3.11 release, so a netloc with a comma is cut out here by
    hand and handed back as written; the transport that allows several hosts parses it itself.
    """
    marker = url.find("://")
    if marker > 0 and _SCHEME.fullmatch(url, 0, marker):  # not a "://" inside a query or path
        start = marker + 3
        end = len(url)
        for stop in "/?#":
            found = url.find(stop, start)
            if found != -1 and found < end:
                end = found
        netloc = url[start:end]
        if "," in netloc:
            return urlsplit(f"{url[:start]}hosts{url[end:]}")._replace(netloc=netloc)
    return urlsplit(url)


def redact(url: str, also: Collection[str] = ()) -> str:
    """``url`` with its password and secret query parameters replaced by ``***``.

    ``also`` names more query parameters to mask, for a caller that knows something the list
    cannot (a key nobody recognises may be a mistyped secret). Text that does not parse as a
    URL is returned unchanged; a URL without secrets comes back byte for byte as it was.
    """
    try:
        parts = split_url(url)
    except ValueError:
        return _redact_userinfo_loosely(url)
    netloc = parts.netloc
    changed = False
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, sep, password = userinfo.partition(":")
        if sep and password:
            netloc = f"{user}:{MASK}@{hostport}"
            changed = True
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        hidden = SECRET_PARAMETERS.union(name.lower() for name in also) if also else SECRET_PARAMETERS
        if any(k.lower() in hidden and v for k, v in pairs):
            query = urlencode(
                [(k, MASK if k.lower() in hidden and v else v) for k, v in pairs],
                safe="*:/,", quote_via=quote,
            )
            changed = True
    if not changed:
        return url
    shown = urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    head = len(parts.scheme)
    if url[head : head + 3] == "://" and shown[head : head + 3] != "://":
        # urlunsplit writes "sqlite:/path" for an empty host: keep the "//" the URL was written with
        shown = f"{shown[:head]}://{shown[head + 1 :]}"
    return shown


def _redact_userinfo_loosely(text: str) -> str:
    head, sep, rest = text.partition("://")
    if not sep or "@" not in rest:
        return text
    userinfo, _, tail = rest.partition("@")
    user, colon, _password = userinfo.partition(":")
    return f"{head}://{user}:{MASK}@{tail}" if colon else text


def redact_text(text: str) -> str:
    """``text`` with every URL in it redacted (:func:`redact`), ``password=...`` pairs masked, and
    the password of a ``user:password@`` left in a path or a URL missing its scheme masked too."""
    if "://" in text:
        text = _URL_IN_TEXT.sub(lambda m: redact(m.group(0)), text)
    if "@" in text:
        text = _BARE_USERINFO.sub(lambda m: f"{m.group(1)}:{MASK}@", text)
    if "=" in text:
        text = _KEYWORD_SECRET.sub(lambda m: f"{m.group(1)}={MASK}", text)
    return text


def one_line(what: BaseException | str, *, first_line: bool = False, typed: bool = False) -> str:
    """``what`` as one line for an error message or a log line.

    A string is text the caller already made safe (a redacted URL, a value quoted back): it
    keeps every character, control characters escaped, so the person sees exactly what they
    wrote. An exception becomes its text redacted (:func:`redact_text`) with whitespace
    collapsed, or its type name when it has no text; ``first_line`` keeps only the first line
    (database drivers append multi-line hints); ``typed`` leads with the type name, except for
    an :class:`~babelq.errors.UnavailableError`, whose text already says what failed.
    """
    if isinstance(what, str):
        return what if what.isprintable() else repr(what)[1:-1]
    text = str(what)
    if first_line:
        text = (text.strip().splitlines() or [""])[0]
    text = " ".join(redact_text(text).split())
    name = type(what).__name__
    if typed and not isinstance(what, UnavailableError):
        return f"{name}: {text}" if text else name
    return text or name


def sqlite_file(url: str, option: str) -> str:
    """The file a ``sqlite://`` URL names: three slashes absolute (``sqlite:///var/q.db``), two
    relative (``sqlite://data/q.db``).

    A SQLite file has no user or password, so a URL that carries one is refused, and shown
    redacted: ``sqlite://user:pw@/x.db`` would otherwise be read as a path through a directory
    named after the password, and an error about that path would print it."""
    parts = urlsplit(url)
    if "@" in parts.netloc:
        raise ConfigurationError(
            f"{option}: {redact(url)!r} carries a user or password, which a sqlite URL does not "
            "take (sqlite:///absolute/path.db or sqlite://relative/path.db)"
        )
    return unquote(parts.netloc + parts.path)

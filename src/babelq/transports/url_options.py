"""One parser for every transport's URL options.

Why one: a transport reading its own query string ends up with its own answers (unknown keys
passed on to a client or refused, a bare ``ValueError`` from ``int()``). So a transport
declares its options once, as a frozen dataclass deriving from :class:`URLOptions`, and this
module does the rest the same way for all of them:

* :class:`TransportURL` splits a URL once: scheme, credentials, host, port, path and the query
  as ``(key, value)`` pairs (percent-decoded, in order, blank values kept).
* :meth:`URLOptions.parse` converts every value by its field's type, whether it came from the
  query (text) or from a keyword of ``from_url(url, **options)`` (any Python value): ``int``,
  ``float``, ``bool``, ``str``, ``Literal[...]`` choices, ``X | None``, or the field's own
  ``parse`` function; fields typed ``Any`` are objects (a ready client) and are keyword-only.
* One precedence: a keyword wins over the URL query, the query over what the transport reads
  from other parts of the URL (``implied``: SQS's region in the host), and that over the default.
* One policy for keys nobody declared, in the query or as a keyword: refused, naming the closest
  known option. A key given twice in the query is refused too (which one was meant?).
* Every problem is one :class:`~babelq.errors.ConfigurationError` line: the option, the value
  (never a secret's), what is accepted, and the URL redacted by :func:`babelq.urls.redact`.

Parsing is cheap on purpose (``open_transport`` runs per Spark task): a class's field table is
built once per process, and nothing here imports a client library.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
import types
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Self, TypeVar, Union, get_args, get_origin, get_type_hints
from urllib.parse import SplitResult, parse_qsl, quote, unquote, urlencode

from babelq.errors import ConfigurationError
from babelq.urls import MASK, SECRET_PARAMETERS, one_line, redact, split_url

T = TypeVar("T")

#: how a boolean option may be spelt (any case). A blank value is no boolean: ``verify=`` could be
#: read either way, and a TLS check must not be switched off by a guess.
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
#: longest rendering of a refused value in a message
_SHOWN_VALUE = 80
_EMPTY: Mapping[str, Any] = types.MappingProxyType({})


def format_value(value: object) -> str:
    """How an option value is written into a URL query (``parse`` reads it back unchanged)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


@dataclass(frozen=True, slots=True)
class TransportURL:
    """A transport URL split once. ``query`` holds the decoded ``(key, value)`` pairs in order."""

    text: str
    parts: SplitResult
    query: tuple[tuple[str, str], ...]

    @classmethod
    def split(cls, url: str) -> TransportURL:
        """Split ``url``; a URL the standard library cannot split is a ConfigurationError."""
        try:
            parts = split_url(url)
        except ValueError as exc:
            raise ConfigurationError(f"url: not a usable URL ({exc}) in {one_line(redact(url))}") from None
        return cls(url, parts, tuple(parse_qsl(parts.query, keep_blank_values=True)))

    @property
    def scheme(self) -> str:
        return self.parts.scheme.lower()

    @property
    def hostname(self) -> str | None:
        return self.parts.hostname

    @property
    def port(self) -> int | None:
        """The port, or None when the URL has none; a port that is not a number is refused."""
        try:
            return self.parts.port
        except ValueError:
            raise ConfigurationError(f"url: the port is not a number in {self.shown()}") from None

    @property
    def username(self) -> str | None:
        return unquote(self.parts.username) if self.parts.username is not None else None

    @property
    def password(self) -> str | None:
        return unquote(self.parts.password) if self.parts.password is not None else None

    def shown(self, *, hide: Collection[str] = ()) -> str:
        """The URL fit to show a person: :func:`babelq.urls.redact` (plus the values of the query
        keys in ``hide``), on one line."""
        return one_line(redact(self.text, also=hide))

    def with_query(self, pairs: Iterable[tuple[str, str]]) -> str:
        """This URL without its query and fragment, then ``pairs`` as its query."""
        query = urlencode(list(pairs), quote_via=quote)
        base = f"{self.parts.scheme}://{self.parts.netloc}{self.parts.path}"
        return f"{base}?{query}" if query else base

    def forwarded(self, names: Collection[str], keywords: Mapping[str, Any]) -> str:
        """This URL keeping only the options in ``names`` for a client that reads them itself
        (redis-py, the AMQP connection): the query's own text, unless a keyword overrides it
        (keyword values are written with :func:`format_value`)."""
        pairs = [(k, v) for k, v in self.query if k in names and k not in keywords]
        pairs += [(k, format_value(v)) for k, v in keywords.items() if k in names and v is not None]
        return self.with_query(pairs)


def option(
    default: T,
    *,
    aliases: tuple[str, ...] = (),
    parse: Callable[[object], T] | None = None,
    format: Callable[[T], str] | None = None,
) -> T:
    """A field of a :class:`URLOptions` class that needs more than its type: other spellings
    (``aliases``), its own ``parse`` (raises ``ValueError`` whose text is the whole problem,
    value included) and the matching ``format`` for writing it back into a query."""
    metadata = {"aliases": aliases, "parse": parse, "format": format}
    return field(default=default, metadata=metadata)


class _RefusedError(ValueError):
    """A value a converter does not take: ``what`` it takes instead and a ``hint``; or, from a
    field's own ``parse``, the ``whole`` problem in its words."""

    def __init__(self, what: str, hint: str = "", *, whole: bool = False) -> None:
        super().__init__(what)
        self.what = what
        self.hint = hint
        self.whole = whole


def to_int(value: object) -> int:
    """``value`` as an option of type ``int`` (for a field's own ``parse``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise _RefusedError("a whole number")


def to_float(value: object) -> float:
    """``value`` as an option of type ``float``: finite (for a field's own ``parse``)."""
    number = math.nan
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        with contextlib.suppress(ValueError, OverflowError):
            number = float(value)
    if not math.isfinite(number):
        raise _RefusedError("a number")
    return number


def to_bool(value: object) -> bool:
    """``value`` as an option of type ``bool`` (for a field's own ``parse``)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    raise _RefusedError("a boolean", "true/false, yes/no, on/off or 1/0")


def _to_str(value: object) -> str:
    if isinstance(value, str):
        return value
    raise _RefusedError("a string")


def _choices(allowed: tuple[str, ...]) -> Callable[[object], str]:
    def convert(value: object) -> str:
        if isinstance(value, str) and value in allowed:
            return value
        raise _RefusedError("one of " + ", ".join(map(repr, allowed)))

    return convert


def _optional(inner: Callable[[object], Any]) -> Callable[[object], Any]:
    def convert(value: object) -> Any:
        return None if value is None or value == "" else inner(value)

    return convert


def _custom(parse: Callable[[object], Any]) -> Callable[[object], Any]:
    def convert(value: object) -> Any:
        try:
            return parse(value)
        except _RefusedError:
            raise  # a shared converter's refusal, worded like the built-in kinds
        except (ValueError, TypeError) as exc:
            raise _RefusedError(str(exc) or type(exc).__name__, whole=True) from None

    return convert


_SIMPLE: dict[Any, Callable[[object], Any]] = {int: to_int, float: to_float, bool: to_bool, str: _to_str}


def _converter(hint: Any) -> tuple[Callable[[object], Any], bool]:
    """The converter of a field typed ``hint``, and whether it is keyword-only (an object)."""
    if hint is Any or hint is object:
        return (lambda value: value), True
    origin = get_origin(hint)
    if origin is Union or origin is types.UnionType:
        inner = [arg for arg in get_args(hint) if arg is not type(None)]
        if len(inner) == 1 and len(get_args(hint)) == 2:
            convert, keyword_only = _converter(inner[0])
            return _optional(convert), keyword_only
    if origin is Literal and all(isinstance(arg, str) for arg in get_args(hint)):
        return _choices(get_args(hint)), False
    if hint in _SIMPLE:
        return _SIMPLE[hint], False
    raise TypeError(f"no URL option converter for {hint!r}: give the field option(parse=...)")


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    default: Any
    convert: Callable[[object], Any]
    keyword_only: bool
    format: Callable[[Any], str]
    secret: bool


@dataclass(frozen=True, slots=True)
class _Table:
    fields: Mapping[str, _Field]
    spellings: Mapping[str, str]  # every accepted spelling (names and aliases) -> field name


_TABLES: dict[type[URLOptions], _Table] = {}


def _table(cls: type[URLOptions]) -> _Table:
    """The fields of ``cls`` with their converters, derived once per process from the type hints
    (a race between two threads builds the same table twice, harmlessly)."""
    found = _TABLES.get(cls)
    if found is None:
        found = _TABLES[cls] = _build_table(cls)
    return found


def _build_table(cls: type[URLOptions]) -> _Table:
    hints = get_type_hints(cls)
    fields: dict[str, _Field] = {}
    spellings: dict[str, str] = {}
    for item in dataclasses.fields(cls):
        parse = item.metadata.get("parse")
        if parse is not None:
            convert, keyword_only = _custom(parse), False
        else:
            convert, keyword_only = _converter(hints[item.name])
        fields[item.name] = _Field(
            name=item.name,
            default=item.default,
            convert=convert,
            keyword_only=keyword_only,
            format=item.metadata.get("format") or format_value,
            secret=item.name.lower() in SECRET_PARAMETERS,
        )
        for spelling in (item.name, *item.metadata.get("aliases", ())):
            spellings[spelling] = item.name
    return _Table(types.MappingProxyType(fields), types.MappingProxyType(spellings))


def _converted(spec: _Field, value: object, spelling: str, url: TransportURL) -> Any:
    """``value`` converted by ``spec``; a refusal is one line naming ``spelling`` (what the user
    wrote), the value (unless secret), what is accepted and the redacted URL."""
    try:
        return spec.convert(value)
    except _RefusedError as exc:
        problem = exc.what if exc.whole else f"not {exc.what}: {_shown_value(value, spec.secret)}"
        hint = f" ({exc.hint})" if exc.hint else ""
        raise ConfigurationError(f"{spelling}: {one_line(problem)}{hint} in {url.shown()}") from None


def _shown_value(value: object, secret: bool) -> str:
    if secret:
        return MASK
    text = one_line(repr(value))
    return text if len(text) <= _SHOWN_VALUE else text[: _SHOWN_VALUE - 3] + "..."


@dataclass(frozen=True, slots=True)
class URLOptions:
    """Base of every transport's options: a frozen dataclass whose fields are the options.

    Subclasses set :attr:`transport` (how errors name it) and may set :attr:`refused`: options
    that exist elsewhere but not here, with the reason (more useful than "unknown").
    """

    transport: ClassVar[str] = "this"
    refused: ClassVar[Mapping[str, str]] = _EMPTY

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every option of the class, in declaration order."""
        return tuple(_table(cls).fields)

    @classmethod
    def parse(
        cls,
        url: TransportURL,
        keywords: Mapping[str, Any] = _EMPTY,
        *,
        implied: Mapping[str, object] = _EMPTY,
    ) -> Self:
        """The options of ``url``'s query and ``keywords`` (which win), over ``implied`` values
        read from the rest of the URL, over the defaults. Every value is checked, overridden or
        not; any problem is one :class:`ConfigurationError` line."""
        table = _table(cls)
        values = {name: _converted(table.fields[name], value, name, url) for name, value in implied.items()}
        from_query: dict[str, str] = {}
        for key, text in url.query:
            name = cls._known(table, key, url, in_query=True)
            if name in from_query:
                again = "" if from_query[name] == key else f" (as {from_query[name]!r} and {key!r})"
                raise ConfigurationError(
                    f"{key}: given more than once in the query{again}; give it once in {url.shown()}"
                )
            from_query[name] = key
            values[name] = _converted(table.fields[name], text, key, url)
        for key, value in keywords.items():
            name = cls._known(table, key, url, in_query=False)
            values[name] = _converted(table.fields[name], value, key, url)
        made: Callable[..., Self] = cls
        return made(**values)

    @classmethod
    def _known(cls, table: _Table, key: str, url: TransportURL, *, in_query: bool) -> str:
        """The field ``key`` spells, or the one-line refusal of a key that is not an option here."""
        name = table.spellings.get(key)
        if name is not None and not (in_query and table.fields[name].keyword_only):
            return name
        where = url.shown(hide=(key,))  # an unknown key may be a mistyped secret: never show its value
        if name is not None:
            raise ConfigurationError(f"{key}: an object, so a keyword option, not a URL option in {where}")
        reason = cls.refused.get(key)
        if reason is not None:
            raise ConfigurationError(f"{key}: {reason} in {where}")
        known = [n for n, f in table.fields.items() if not (in_query and f.keyword_only)]
        close = difflib.get_close_matches(key, list(table.spellings), n=1)
        guess = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigurationError(
            f"{one_line(key)}: not an option of the {cls.transport} transport "
            f"({guess}known: {', '.join(known)}) in {where}"
        )

    def values(self, *, without: Collection[str] = ()) -> dict[str, Any]:
        """The options as keywords, for the transport's constructor (whose keywords have the
        options' names; ``without``: those it takes some other way)."""
        return {name: getattr(self, name) for name in _table(type(self)).fields if name not in without}

    def query(self) -> str:
        """The options that differ from their defaults as a URL query (secrets included: this
        builds URLs; :meth:`describe` is for showing them). ``parse`` reads it back equal."""
        pairs = [(name, spec.format(value)) for name, spec, value in self._changed() if not spec.keyword_only]
        return urlencode(pairs, quote_via=quote)

    def describe(self) -> str:
        """The options that differ from their defaults, fit to show a person: secrets as ``***``,
        objects by their type, on one line (``prefetch=7 reserve_mode=get token=***``)."""
        shown = []
        for name, spec, value in self._changed():
            if spec.secret:
                text = MASK
            elif spec.keyword_only:
                text = f"<{type(value).__name__}>"
            else:
                text = one_line(spec.format(value))
            shown.append(f"{name}={text}")
        return " ".join(shown) or "defaults"

    def _changed(self) -> list[tuple[str, _Field, Any]]:
        table = _table(type(self))
        changed = []
        for name, spec in table.fields.items():
            value = getattr(self, name)
            if value is not None and value != spec.default:
                changed.append((name, spec, value))
        return changed

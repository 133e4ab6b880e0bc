"""Typed payloads: a handler asks for ``data`` as a model, and gets it checked and converted.

A handler whose one parameter is annotated with a payload type receives the message's ``data``
as that type instead of the :class:`~babelq.runtime.message.Message` (which stays reachable as
:func:`babelq.runtime.current_message`)::

    @app.handler("urn:babel:orders:created")
    def created(order: Order) -> None: ...

Payload types: a pydantic v2 model, a msgspec ``Struct``, a dataclass or a ``TypedDict``. Data
that does not fit is the message's own fault and can never fit on a later attempt, so it is
dead-lettered at once (reason ``failed``, cause ``schema``) with every failing JSON path named
(msgspec stops at its first error, so there it names one). Dataclasses and TypedDicts are checked
here, without any library, for the JSON types (``str``, ``int``, ``float``, ``bool``, ``None``,
``list[...]``, ``dict[str, ...]``, unions and ``Optional``, ``Literal``, ``Any``, nested
dataclasses and TypedDicts); a field of another type is refused when the handler is registered.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

from babelq.errors import SHOWN_ERRORS as SHOWN_ERRORS
from babelq.errors import ConfigurationError
from babelq.errors import PayloadError as PayloadError

Converter = Callable[[Mapping[str, Any]], Any]


def _is_pydantic_model(tp: object) -> bool:
    return isinstance(tp, type) and hasattr(tp, "model_validate") and hasattr(tp, "model_fields")


def _is_msgspec_struct(tp: object) -> bool:
    return isinstance(tp, type) and hasattr(tp, "__struct_fields__")


def is_payload_type(tp: object) -> bool:
    """Whether ``tp`` is a type a handler can ask ``data`` to be converted to."""
    return (
        _is_pydantic_model(tp)
        or _is_msgspec_struct(tp)
        or (isinstance(tp, type) and dataclasses.is_dataclass(tp))
        or is_typeddict(tp)
    )


def payload_type(urn: str, handler: Callable[..., object]) -> type | None:
    """The payload type ``handler``'s one parameter is annotated with, or None (it takes the message).

    A string annotation that cannot be resolved (a class defined inside a function, under
    ``from __future__ import annotations``) is a ConfigurationError unless it names ``Message``:
    guessing would hand the handler the wrong object."""
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):
        return None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = [p for p in signature.parameters.values() if p.kind in positional]
    if not params:
        return None
    first = params[0]
    annotation = first.annotation
    if annotation is inspect.Parameter.empty:
        return None
    if isinstance(annotation, str):
        target = handler
        if not inspect.isfunction(target) and not inspect.ismethod(target):
            target = getattr(type(handler), "__call__", handler)  # noqa: B004 - a callable object
        try:
            hints = get_type_hints(target)
        except Exception:
            hints = {}
        resolved = hints.get(first.name)
        if resolved is None:
            if annotation.split(".")[-1].split("[")[0] in {"Message", "Any", "object"}:
                return None
            name = getattr(handler, "__qualname__", type(handler).__qualname__)
            raise ConfigurationError(
                f"handler for {urn!r}: {name}: cannot resolve the annotation {annotation!r} of "
                f"parameter {first.name!r}; define the type at module level"
            )
        annotation = resolved
    return annotation if is_payload_type(annotation) else None


def converter(tp: type) -> Converter:
    """A function turning ``data`` into ``tp`` (raises :class:`PayloadError`); checks ``tp`` now."""
    name = tp.__qualname__
    if _is_pydantic_model(tp):
        return _pydantic(tp, name)
    if _is_msgspec_struct(tp):
        return _msgspec(tp, name)
    check = _checker(tp, name)

    def convert(data: Mapping[str, Any]) -> Any:
        errors: list[str] = []
        value = check(dict(data), "$", errors)
        if errors:
            raise PayloadError(name, errors)
        return value

    return convert


def _json_path(location: tuple[object, ...]) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in location)


def _pydantic(tp: Any, name: str) -> Converter:
    from pydantic import ValidationError

    def convert(data: Mapping[str, Any]) -> Any:
        try:
            return tp.model_validate(dict(data))
        except ValidationError as exc:
            errors = [f"{_json_path(tuple(e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False)]
            raise PayloadError(name, errors) from None

    return convert


def _msgspec(tp: Any, name: str) -> Converter:
    import msgspec

    def convert(data: Mapping[str, Any]) -> Any:
        try:
            return msgspec.convert(dict(data), tp)
        except msgspec.ValidationError as exc:
            text = str(exc)
            problem, _, where = text.partition(" - at `")
            raise PayloadError(name, [f"{where.rstrip('`') or '$'}: {problem}"]) from None

    return convert


# -- dataclasses and TypedDicts, checked here ------------------------------------------------------

Check = Callable[[Any, str, list[str]], Any]


def _describe(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _checker(tp: Any, where: str) -> Check:
    """A checker for ``tp``: ``check(value, path, errors) -> converted`` (appends to ``errors``)."""
    if tp is Any or tp is object:
        return lambda value, path, errors: value
    if tp is None or tp is type(None):
        return _exact(lambda v: v is None, "null")
    if tp is bool:
        return _exact(lambda v: v is True or v is False, "a boolean")
    if tp is int:
        return _exact(lambda v: type(v) is int, "an integer")
    if tp is float:
        return _float
    if tp is str:
        return _exact(lambda v: type(v) is str, "a string")
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return _union([_checker(arg, where) for arg in get_args(tp)], tp)
    if origin is Literal:
        allowed = get_args(tp)
        return _exact(lambda v: any(v == a and type(v) is type(a) for a in allowed), f"one of {allowed!r}")
    if origin in (list, typing.List) or tp is list:  # noqa: UP006 - matching the alias itself
        item = _checker(get_args(tp)[0], where) if get_args(tp) else _checker(Any, where)
        return _list(item)
    if origin in (dict, typing.Dict) or tp is dict:  # noqa: UP006 - matching the alias itself
        args = get_args(tp)
        if args and args[0] is not str:
            raise ConfigurationError(f"payload type {where}: JSON object keys are strings, not {args[0]!r}")
        return _dict(_checker(args[1], where) if args else _checker(Any, where))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass(tp)
    if is_typeddict(tp):
        return _typeddict(tp)
    if _is_pydantic_model(tp) or _is_msgspec_struct(tp):
        nested = converter(tp)

        def check_nested(value: Any, path: str, errors: list[str]) -> Any:
            if not isinstance(value, dict):
                errors.append(f"{path}: expected an object, got {_describe(value)}")
                return None
            try:
                return nested(value)
            except PayloadError as exc:
                errors.extend(f"{path}{e[1:]}" for e in exc.errors)
                return None

        return check_nested
    raise ConfigurationError(
        f"payload type {where}: {tp!r} is not a JSON type babelq checks (str, int, float, bool, None, "
        "list, dict[str, ...], Optional, Literal, Any, a dataclass, a TypedDict); use a pydantic model "
        "for richer types"
    )


def _exact(test: Callable[[Any], bool], expected: str) -> Check:
    def check(value: Any, path: str, errors: list[str]) -> Any:
        if not test(value):
            errors.append(f"{path}: expected {expected}, got {_describe(value)}")
        return value

    return check


def _float(value: Any, path: str, errors: list[str]) -> Any:
    if type(value) is float:
        return value
    if type(value) is int:  # JSON has one number type: 3 is a fine float
        return float(value)
    errors.append(f"{path}: expected a number, got {_describe(value)}")
    return value


def _union(options: list[Check], tp: Any) -> Check:
    def check(value: Any, path: str, errors: list[str]) -> Any:
        for option in options:
            attempt: list[str] = []
            converted = option(value, path, attempt)
            if not attempt:
                return converted
        errors.append(f"{path}: expected {_union_name(tp)}, got {_describe(value)}")
        return value

    return check


def _union_name(tp: Any) -> str:
    return " or ".join("null" if a is type(None) else getattr(a, "__name__", repr(a)) for a in get_args(tp))


def _list(item: Check) -> Check:
    def check(value: Any, path: str, errors: list[str]) -> Any:
        if not isinstance(value, list):
            errors.append(f"{path}: expected an array, got {_describe(value)}")
            return value
        return [item(v, f"{path}[{i}]", errors) for i, v in enumerate(value)]

    return check


def _dict(item: Check) -> Check:
    def check(value: Any, path: str, errors: list[str]) -> Any:
        if not isinstance(value, dict):
            errors.append(f"{path}: expected an object, got {_describe(value)}")
            return value
        return {k: item(v, f"{path}.{k}", errors) for k, v in value.items()}

    return check


def _fields(tp: Any) -> tuple[dict[str, Check], set[str]]:
    """Checkers of ``tp``'s fields, and the names a value must have."""
    try:
        hints = get_type_hints(tp)
    except Exception as exc:
        raise ConfigurationError(
            f"payload type {tp.__qualname__}: cannot resolve its annotations ({exc})"
        ) from None
    checks = {name: _checker(hint, f"{tp.__qualname__}.{name}") for name, hint in hints.items()}
    if dataclasses.is_dataclass(tp):
        required = {
            f.name
            for f in dataclasses.fields(tp)
            if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
        checks = {f.name: checks[f.name] for f in dataclasses.fields(tp) if f.init}
    else:
        required = set(getattr(tp, "__required_keys__", hints))
    return checks, required


def _dataclass(tp: Any) -> Check:
    checks, required = _fields(tp)

    def check(value: Any, path: str, errors: list[str]) -> Any:
        if not isinstance(value, dict):
            errors.append(f"{path}: expected an object, got {_describe(value)}")
            return None
        before = len(errors)
        kwargs = _object(value, path, errors, checks, required)
        return tp(**kwargs) if len(errors) == before else None

    return check


def _typeddict(tp: Any) -> Check:
    checks, required = _fields(tp)

    def check(value: Any, path: str, errors: list[str]) -> Any:
        if not isinstance(value, dict):
            errors.append(f"{path}: expected an object, got {_describe(value)}")
            return value
        extra = {k: v for k, v in value.items() if k not in checks}  # TypedDicts keep unknown keys
        return {**extra, **_object(value, path, errors, checks, required)}

    return check


def _object(
    value: dict[str, Any], path: str, errors: list[str], checks: dict[str, Check], required: set[str]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, check in checks.items():
        if name in value:
            out[name] = check(value[name], f"{path}.{name}", errors)
        elif name in required:
            errors.append(f"{path}.{name}: is required")
    return out

"""A quick accept-only check compiled from a JSON Schema: ``True`` only for values the schema accepts.

A consumer on a hot path (settle posts one transfer per message) needs a verdict far cheaper
than jsonschema's for the common case, valid data, without keeping a hand-written copy of the
schema's rules that drifts from it. :func:`quick_check` compiles the schema once into a plain
Python function of straight-line tests (``type(v) is str``, a compiled pattern's ``search``, a
frozenset for an ``enum``, chained bounds), as one would write by hand. It is *accept-only*:
``True`` means jsonschema accepts the value too; ``False`` means "not obviously valid", and the
caller asks the full validator for the verdict and the error texts. So the check may refuse
more than the schema does, and does where exactness would cost time on the common path:

* ``integer`` and ``number`` take Python ``int`` (never ``bool``) and ``float`` values only:
  ``1.0`` for an ``integer``, NaN for a bound, are left to the full validator;
* ``enum``/``const`` accept strings, non-bool ints, booleans and ``null`` by equality; a value
  that equals a float, object or array member is left to the full validator;
* ``object`` is a ``dict``, ``array`` a ``list`` (what ``json``/``orjson`` produce).

Everything else is exact: ``pattern`` is ``re.search`` (what jsonschema runs, so ``$`` also
matches before a final newline), lengths are code points, bounds compare as Python compares.

The schema must keep to :mod:`babelq.schema.subset` (the Spark check's subset too);
anything else raises :class:`~babelq.schema.subset.UnsupportedSchemaError` when compiling, rather
than silently making every value "not obviously valid".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from babelq.schema.subset import (
    JsonSchema,
    UnsupportedSchemaError,
    check_schema,
    count,
    python_regex,
    types_of,
)

#: type tests of the scalar JSON types, on the value named ``{v}``
_SCALAR_TYPES = {
    "null": "{v} is None",
    "boolean": "type({v}) is bool",
    "string": "type({v}) is str",
    "integer": "type({v}) is int",
    "number": "(type({v}) is int or type({v}) is float)",
}
#: the keywords that apply to values of one type only
_TYPED_KEYWORDS = frozenset({
    "minLength", "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "items", "minItems", "maxItems", "required", "properties", "additionalProperties",
})
#: (keyword, the test that holds when the value keeps to it; {b} is the bound)
_BOUNDS = (
    ("minimum", "{b} <= {v}"),
    ("exclusiveMinimum", "{b} < {v}"),
    ("maximum", "{v} <= {b}"),
    ("exclusiveMaximum", "{v} < {b}"),
)


class _Writer:
    """The generated function's source lines, its constants and its local names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.constants: dict[str, object] = {}
        self._names = 0

    def constant(self, value: object) -> str:
        """A global name in the generated module holding ``value`` (never spliced in as text)."""
        name = f"_k{len(self.constants)}"
        self.constants[name] = value
        return name

    def local(self) -> str:
        self._names += 1
        return f"v{self._names}"

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def block(self, depth: int, header: str, body: Callable[[int], None]) -> None:
        """``header:`` and the statements ``body(depth + 1)`` emits (``pass`` when it emits none)."""
        self.emit(depth, header + ":")
        before = len(self.lines)
        body(depth + 1)
        if len(self.lines) == before:
            self.emit(depth + 1, "pass")


def _equality(w: _Writer, values: list[Any], v: str) -> str:
    """A test that holds only when ``v`` equals one of ``values`` as jsonschema's ``equal`` decides."""
    tests: list[str] = []
    strings = frozenset(x for x in values if type(x) is str)
    ints = frozenset(x for x in values if type(x) is int)
    if strings:
        tests.append(f"(type({v}) is str and {v} in {w.constant(strings)})")
    if ints:
        tests.append(f"(type({v}) is int and {v} in {w.constant(ints)})")
    tests += [f"{v} is {x!r}" for x in (None, True, False) if any(y is x for y in values)]
    return " or ".join(tests) or "False"


def _scalar(w: _Writer, schema: Mapping[str, Any], name: str, v: str) -> str:
    """The test of a value of scalar type ``name`` against the keywords that apply to that type."""
    tests = [_SCALAR_TYPES[name].format(v=v)]
    if name == "string":
        low, high = count(schema, "minLength", "#"), count(schema, "maxLength", "#")
        if low and high is not None:
            tests.append(f"{low} <= len({v}) <= {high}")
        elif low:
            tests.append(f"{low} <= len({v})")
        elif high is not None:
            tests.append(f"len({v}) <= {high}")
        if "pattern" in schema:
            tests.append(f"{w.constant(python_regex(schema['pattern']).search)}({v}) is not None")
    elif name in ("integer", "number"):
        for keyword, test in _BOUNDS:
            if keyword in schema:
                bound = schema[keyword]  # an int is written out; a float may be inf or nan, no literal
                tests.append(test.format(b=repr(bound) if type(bound) is int else w.constant(bound), v=v))
    return " and ".join(tests)


def _object(w: _Writer, schema: Mapping[str, Any], v: str, depth: int) -> None:
    """Tests of a ``dict`` value: required members, then each property's schema, then the rest."""
    properties: Mapping[str, Any] = schema.get("properties", {})
    required = list(schema.get("required", []))
    for name in required:
        if name not in properties:
            w.emit(depth, f"if {name!r} not in {v}: return False")
    if properties:
        get = w.local()
        w.emit(depth, f"{get} = {v}.get")
    for name, sub in properties.items():
        member = w.local()
        if name in required and _refuses_null(sub):  # a missing member reads as None: refused
            w.emit(depth, f"{member} = {get}({name!r})")
            _node(w, sub, member, depth)
        elif name in required:
            w.emit(depth, f"{member} = {get}({name!r}, _ABSENT)")
            w.emit(depth, f"if {member} is _ABSENT: return False")
            _node(w, sub, member, depth)
        else:
            w.emit(depth, f"{member} = {get}({name!r}, _ABSENT)")
            w.block(depth, f"if {member} is not _ABSENT", partial(_node, w, sub, member))
    extra = schema.get("additionalProperties", True)
    if extra is False:
        w.emit(depth, f"if not {w.constant(frozenset(properties))}.issuperset({v}): return False")
    elif extra is not True:
        key, member = w.local(), w.local()
        known = w.constant(frozenset(properties))
        w.block(depth, f"for {key}, {member} in {v}.items()",
                partial(w.block, header=f"if {key} not in {known}", body=partial(_node, w, extra, member)))


def _refuses_null(schema: JsonSchema) -> bool:
    """Whether the compiled test of ``schema`` surely returns False for ``None``."""
    if not isinstance(schema, Mapping):
        return schema is False
    names = types_of(schema, "#")
    if names is not None and "null" not in names:
        return True
    if "enum" in schema and not any(x is None for x in schema["enum"]):
        return True
    return "const" in schema and schema["const"] is not None


def _array(w: _Writer, schema: Mapping[str, Any], v: str, depth: int) -> None:
    """Tests of a ``list`` value: its length, then every item (a plain loop, no generator)."""
    low, high = count(schema, "minItems", "#"), count(schema, "maxItems", "#")
    if low:
        w.emit(depth, f"if len({v}) < {low}: return False")
    if high is not None:
        w.emit(depth, f"if len({v}) > {high}: return False")
    items = schema.get("items", True)
    if items is False:
        w.emit(depth, f"if {v}: return False")
    elif items is not True:
        item = w.local()
        w.block(depth, f"for {item} in {v}", partial(_node, w, items, item))


def _node(w: _Writer, schema: JsonSchema, v: str, depth: int) -> None:
    """Statements that ``return False`` unless the value named ``v`` is obviously valid."""
    if schema is True:
        return
    if schema is False:
        w.emit(depth, "return False")
        return
    assert isinstance(schema, Mapping)
    for keyword in ("enum", "const"):
        if keyword in schema:
            values = schema["enum"] if keyword == "enum" else [schema["const"]]
            w.emit(depth, f"if not ({_equality(w, values, v)}): return False")
    names = types_of(schema, "#")
    if names is None:  # every type, each with the keywords that apply to it
        if not _TYPED_KEYWORDS.intersection(schema):
            return
        names = ["object", "array", "null", "boolean", "number", "string"]
    branch = "if"
    if "object" in names:
        w.block(depth, f"if type({v}) is dict", partial(_object, w, schema, v))
        branch = "elif"
    if "array" in names:
        w.block(depth, f"{branch} type({v}) is list", partial(_array, w, schema, v))
        branch = "elif"
    scalars = [_scalar(w, schema, name, v) for name in names if name in _SCALAR_TYPES]
    if not scalars:
        w.emit(depth, "else: return False")
    elif len(scalars) == 1:
        w.emit(depth, f"{branch} not ({scalars[0]}): return False")
    else:
        w.emit(depth, f"{branch} not ({' or '.join(f'({test})' for test in scalars)}): return False")


def quick_check_source(schema: JsonSchema) -> tuple[str, dict[str, object]]:
    """The generated function's source (named ``quick_check``) and the constants it reads.

    For reading what :func:`quick_check` runs; raises as :func:`quick_check` does."""
    check_schema(schema, by="the quick schema check")
    w = _Writer()
    w.emit(0, "def quick_check(v0):")
    _node(w, schema, "v0", 1)
    w.emit(1, "return True")
    return "\n".join(w.lines) + "\n", w.constants


def quick_check(schema: JsonSchema) -> Callable[[Any], bool]:
    """A function that returns ``True`` only for values ``schema`` accepts (see the module docstring).

    Compile it once (at import, or cached) and call it per value: compiling the transfer schema
    takes under a millisecond, a call about as long as the tests a person would write for it."""
    source, constants = quick_check_source(schema)
    namespace: dict[str, Any] = {**constants, "_ABSENT": object()}
    try:
        code = compile(source, "<babelq quick schema check>", "exec")
    except (SyntaxError, RecursionError) as exc:  # Python allows 20 nested blocks in one function
        problem = f"nested too deeply for the quick check ({exc})"
        raise UnsupportedSchemaError("(schema)", "#", problem) from None
    exec(code, namespace)  # our own text; the schema's values reach it as names, never as source
    check: Callable[[Any], bool] = namespace["quick_check"]
    return check

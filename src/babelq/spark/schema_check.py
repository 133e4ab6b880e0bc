"""JSON Schema checks as Spark SQL expressions: each row's first violation, computed on the JVM.

:func:`first_violation` compiles a JSON Schema against the Spark type of a column into one
Column that is null when the value is valid and otherwise holds the first violation as
``"<JSON path>: <message>"`` (``$.amount_cents: 0 is less than the minimum of 1``; the path is
written as jsonschema's ``ValidationError.json_path``). The verdict (valid or not) is the one
``jsonschema`` gives for the Python value PySpark hands back for the same cell, which is the
JSON object :mod:`babelq.spark.encode` writes: a struct field is always present, a null field
is JSON ``null``, a map is an object whose keys are its entries, a float is widened to double.

Supported keywords (drafts 6, 7, 2019-09 and 2020-12, which agree on all of them):

* any value: ``type`` (one or a list), ``enum`` and ``const`` (scalar values; object or array
  values only against scalar columns, where they never match);
* strings: ``minLength``, ``maxLength`` (code points, as Python's ``len``), ``pattern`` (see below);
* numbers: ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum`` (numeric
  form), compared exactly as Python compares ints and floats (no rounding of 2**53+1);
* arrays: ``items`` (one schema or a boolean), ``minItems``, ``maxItems``;
* objects: ``required``, ``properties``, ``additionalProperties`` (a boolean or a schema),
  nested to any depth, for struct columns and ``map<string, _>`` columns;
* boolean schemas (``true``/``false``);
* annotations, ignored as jsonschema ignores them: ``$schema`` (one of the drafts above),
  ``$id``, ``$comment``, ``$defs``/``definitions``, ``title``, ``description``, ``default``,
  ``examples``, ``deprecated``, ``readOnly``, ``writeOnly`` and any ``x-...`` key.

Any other keyword (``$ref``, ``allOf``, ``format``, ``multipleOf``, ``prefixItems``,
``patternProperties``...) raises :class:`UnsupportedSchemaError` naming the keyword and its
location in the schema (``#/properties/amount/multipleOf``): a check that silently skipped a
keyword would accept rows the schema refuses.

``pattern`` follows Python's ``re.search`` (what jsonschema runs), translated to a Java regex
run by ``rlike`` (also a search): ``$`` matches at the end or before a final newline and ``.``
matches anything but a newline (Java's ``UNIX_LINES``); ``\\d`` is a Unicode decimal digit
(``\\p{Nd}``); ``[`` and ``&`` inside a class and ``{`` that does not start a quantifier are
literals, as in Python. Shorthands whose Unicode meaning differs between the two engines
(``\\w \\s \\b`` and their negations), backreferences and inline flags are refused.

Violations are looked for in a fixed order, and the first found is reported: ``type``,
``const``, ``enum``, string keywords, number keywords, ``minItems``, ``maxItems``, then
``items`` element by element; ``required`` in its order, ``additionalProperties: false``, then
``properties`` in schema order, then ``additionalProperties`` schemas on the extra members.

This module is the public face of three with one job each: :mod:`babelq.schema.subset` (which
schemas are supported, shared with the quick Python check of :mod:`babelq.schema.quick`),
:mod:`babelq.spark.schema_regex` (the ``pattern`` translation) and
:mod:`babelq.spark.schema_columns` (the compiler).
"""

from babelq.schema.subset import JsonSchema, UnsupportedSchemaError
from babelq.spark.schema_columns import check_schema, first_violation, first_violation_of, key_segment
from babelq.spark.schema_conditions import Kind, kind_of
from babelq.spark.schema_regex import java_regex

__all__ = [
    "JsonSchema",
    "Kind",
    "UnsupportedSchemaError",
    "check_schema",
    "first_violation",
    "first_violation_of",
    "java_regex",
    "key_segment",
    "kind_of",
]

"""JSON Schema ``pattern`` regexes (Python ``re`` syntax, as jsonschema runs them) as Java regexes.

The Spark schema check (:mod:`babelq.spark.schema_check`) and ingest's SQL rules
(:mod:`babelq.pipelines.ingest_rules`) run a schema's patterns with Spark's ``rlike``, a Java regex
search; :func:`java_regex` is the one place that makes such a search find what Python's
``re.search`` finds:

* ``$`` matches at the end or before a final newline, and ``.`` matches anything but a newline
  (Java's ``UNIX_LINES``, ``(?d)``: otherwise Java also treats ``\\r``, ``\\u0085``,
  ``\\u2028``... as line ends);
* ``\\d`` is a Unicode decimal digit (``\\p{Nd}``), as in Python's ``str`` patterns;
* ``[`` and ``&`` inside a class and ``{`` that does not start a quantifier are literals, as in
  Python (Java would read a nested class, an intersection ``&&``, a broken quantifier);
* named groups lose their names, ``\\Z`` becomes ``\\z``, ``\\x``/``\\u``/``\\U`` escapes become
  ``\\x{...}``.

Shorthands whose Unicode meaning differs between the two engines (``\\w \\s \\b`` and their
negations), backreferences and inline flags are refused with
:class:`~babelq.schema.subset.UnsupportedSchemaError` rather than translated approximately.
"""

from __future__ import annotations

import re

from babelq.schema.subset import UnsupportedSchemaError, python_regex

_QUANTIFIER = re.compile(r"\{(\d*)(?:(,)(\d*))?\}")
_LOOK = ("(?:", "(?=", "(?!", "(?<=", "(?<!", "(?>")


def java_regex(pattern: str, location: str = "#/pattern") -> str:
    """``pattern`` (Python ``re`` syntax, as jsonschema runs it) as an equivalent Java regex."""
    python_regex(pattern, location)  # refused when Python cannot compile it: jsonschema could not run it

    def refuse(what: str) -> UnsupportedSchemaError:
        return UnsupportedSchemaError("pattern", location, f"{what} in {pattern!r} is not supported")

    out = ["(?d)"]
    i, n = 0, len(pattern)
    in_class = class_start = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            e = pattern[i + 1]
            step = 2
            if e == "d":
                out.append(r"\p{Nd}")
            elif e == "D":
                out.append(r"\P{Nd}")
            elif e in "wWsSbB":
                raise refuse(f"\\{e} (its Unicode meaning differs between Python and Java)")
            elif e == "A":
                out.append(r"\A")
            elif e == "Z":
                out.append(r"\z")
            elif e in "ntrfa":
                out.append("\\" + e)
            elif e == "v":
                out.append(r"\x0B")
            elif e in "xuU":
                width = {"x": 2, "u": 4, "U": 8}[e]
                out.append("\\x{" + pattern[i + 2 : i + 2 + width] + "}")
                step = 2 + width
            elif e.isdigit():
                raise refuse(f"\\{e} (a backreference or octal escape)")
            elif e.isalnum():
                raise refuse(f"\\{e}")
            else:
                out.append("\\" + e)
            i += step
            class_start = False
            continue
        if in_class:
            if c == "]" and not class_start:
                in_class = False
                out.append("]")
            elif c in "[]&":
                out.append("\\" + c)
            else:
                out.append(c)
            class_start = False
            i += 1
            continue
        if c == "[":
            in_class = class_start = True
            if pattern.startswith("^", i + 1):
                out.append("[^")
                i += 2
            else:
                out.append("[")
                i += 1
            continue
        if c == "{":
            m = _QUANTIFIER.match(pattern, i)
            if m and (m.group(1) or m.group(2)):
                low, comma, high = m.group(1) or "0", m.group(2) or "", m.group(3) or ""
                out.append("{" + low + comma + high + "}")
                i = m.end()
            else:
                out.append(r"\{")
                i += 1
            continue
        if c == "}":
            out.append(r"\}")
            i += 1
            continue
        if c == "(" and pattern.startswith("?", i + 1):
            if pattern.startswith("(?P<", i):
                close = pattern.index(">", i)
                out.append("(")
                i = close + 1
                continue
            look = next((p for p in _LOOK if pattern.startswith(p, i)), None)
            if look is None:
                raise refuse(f"the group {pattern[i : i + 4]!r}... (inline flags, comments, backreferences)")
            out.append(look)
            i += len(look)
            continue
        out.append(c)
        i += 1
    return "".join(out)

"""babelq.spark.decode gives the core codec's verdict and fields, computed on the JVM."""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from babelq.envelope import decode as core_decode
from babelq.envelope import make
from babelq.errors import DecodeError

pytestmark = pytest.mark.spark

sf: Any = pytest.importorskip("pyspark.sql.functions")
T: Any = pytest.importorskip("pyspark.sql.types")
CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"


def _core(body: bytes) -> tuple[bool, str | None, Any]:
    """(accepted, reason, envelope-or-None) from the core codec."""
    try:
        env = core_decode(body)
    except DecodeError as exc:
        return False, str(exc), None
    return env.accepts(), env.rejection(), env


def _compare(rows: list[Any]) -> list[str]:
    problems = []
    for row in rows:
        body = bytes(row["body"])
        accepted, reason, env = _core(body)
        if row["accepted"] != accepted:
            problems.append(f"verdict {row['accepted']} != {accepted} for {body!r}")
            continue
        if env is None:
            # Poison: our reason is the core's without the parser's position detail.
            if not reason or not reason.startswith(row["reject_reason"]):
                problems.append(f"poison reason {row['reject_reason']!r} vs {reason!r}")
            continue
        version = env.meta.get("schema_version")
        awkward = (
            (type(version) is str and repr(version) != f"'{version}'")
            or (type(version) in (dict, list) and version)
            or (type(version) is float and version == 0.0)  # the variant keeps no sign on zero
        )
        if awkward and reason is not None and reason.startswith("meta.schema_version is "):
            # Python's repr of these values is only approximated in the reason text.
            reason = "meta.schema_version is "
            if not row["reject_reason"].startswith(reason):
                problems.append(f"reason {row['reject_reason']!r} vs {reason!r}")
        elif row["reject_reason"] != reason:
            problems.append(f"reason {row['reject_reason']!r} != {reason!r} for {body!r}")
        got = (row["urn"], row["trace_id"], row["id"], row["queue"], row["lang"], row["attempts"])
        # attempts beyond signed 64 bits cannot be a Spark long: decode reports 0 (documented).
        attempts = env.attempts if -(2**63) <= env.attempts < 2**63 else 0
        want = (env.urn, env.trace_id, env.id, env.queue, env.lang, attempts)
        if got != want:
            problems.append(f"fields {got} != {want}")
        if accepted and json.loads(row["data_json"]) != env.data:
            problems.append(f"data {row['data_json']!r} != {env.data!r}")
    return problems


def test_conformance_fixtures(spark: Any) -> None:
    from babelq.spark.decode import decode

    manifest = json.loads((CONFORMANCE / "manifest.json").read_text())
    cases = manifest["cases"]
    bodies = [(case["name"], (CONFORMANCE / case["file"]).read_bytes()) for case in cases]
    rows = {r["name"]: r for r in decode(spark.createDataFrame(bodies, "name string, body binary")).collect()}
    assert not _compare(list(rows.values()))
    for case in cases:
        row = rows[case["name"]]
        assert row["accepted"] is case["valid"], case["name"]
        if not case["valid"]:
            continue
        expect = case["expect"]
        assert row["urn"] == expect["urn"]
        assert json.loads(row["data_json"]) == expect["data"]
        assert row["attempts"] == expect["attempts"]
        assert row["lang"] == expect["lang"]
        assert row["schema_version"] == expect["schema_version"]
        if "dead_letter" in expect:
            block = row["dead_letter"].asDict()
            assert {k: block[k] for k in expect["dead_letter"]} == expect["dead_letter"]
        else:
            assert row["dead_letter"] is None


# -- fuzz corpus: valid envelopes, then broken at the JSON level and at the byte level -----------

WILD = [None, True, False, 0, 1, -1, 7, 2**63 - 1, 2**64, -(2**70), 1.0, 0.5, 1e20, -0.0, "", " ", "\t\n",
        "1", "true", "x", "{}", [], [1], {}, {"schema_version": 1}, {"a": None}]  # fmt: skip
FIELDS = [
    "job",
    "urn",
    "trace_id",
    "data",
    "meta",
    "attempts",
    "meta.schema_version",
    "meta.id",
    "meta.created_at",
    "dead_letter",
]
MUTATIONS = ["none", "none", "none", "truncate", "append", "insert", "flip", "wrap", "scalar", "repeat"]
TAILS = [b"}", b" ", b"\n", b"x", b",{}", b"]", b"\x00", b" {}", b"\xff", b"\n\t "]


def _value(rnd: random.Random, depth: int = 0) -> Any:
    kind = rnd.randrange(9 if depth < 2 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rnd.random() < 0.5
    if kind == 2:
        return rnd.randint(-(2**63), 2**63 - 1) if rnd.random() < 0.3 else rnd.randint(-1000, 1000)
    if kind == 3:
        return rnd.choice([rnd.uniform(-1e6, 1e6), rnd.random() * 10 ** rnd.randint(-320, 300), 1e16, 5e-324])
    if kind in (4, 5):
        return "".join(
            chr(rnd.choice([rnd.randint(0, 0x7F), rnd.randint(0x80, 0xD7FF), 0x2028])) for _ in range(4)
        )
    if kind in (6, 7):
        return {f"k{rnd.randint(0, 99)}\u00e9": _value(rnd, depth + 1) for _ in range(3)}
    return [_value(rnd, depth + 1) for _ in range(rnd.randint(0, 3))]


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """One body: a made envelope, maybe with fields changed/removed, maybe broken as bytes."""
    seed = draw(st.integers(0, 2**32))
    rnd = random.Random(seed)
    data = {f"f{i}": _value(rnd) for i in range(rnd.randint(0, 4))}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        doc = make(
            "urn:babel:fuzz:case", data, queue=f"q{seed % 3}", created_at=1_700_000_000_000 + seed
        ).to_dict()
    changes = draw(
        st.lists(st.tuples(st.sampled_from(FIELDS), st.booleans(), st.sampled_from(WILD)), max_size=2)
    )
    for field, remove, value in changes:
        meta = doc.get("meta")
        target, key = (meta, field[5:]) if field.startswith("meta.") and type(meta) is dict else (doc, field)
        if remove:
            target.pop(key, None)
        else:
            target[key] = value
    body = json.dumps(doc, ensure_ascii=rnd.random() < 0.3, indent=rnd.choice([None, None, 1])).encode(
        "utf-8"
    )
    mutation = draw(st.sampled_from(MUTATIONS))
    at = draw(st.integers(0, 10**6)) % len(body)  # independent of the body's length: ids vary
    if mutation == "truncate":
        body = body[:at]
    elif mutation == "append":
        body += draw(st.sampled_from(TAILS))
    elif mutation == "insert":
        body = body[:at] + draw(st.binary(min_size=1, max_size=2)) + body[at:]
    elif mutation == "flip":
        body = body[:at] + bytes([body[at] ^ (1 << draw(st.integers(0, 7)))]) + body[at + 1 :]
    elif mutation == "wrap":
        body = b"[" + body + b"]"
    elif mutation == "scalar":
        body = json.dumps(draw(st.sampled_from(WILD))).encode()
    elif mutation == "repeat" and body.startswith(b"{") and body.rstrip().endswith(b"}"):
        # a key written twice: the last one wins in the core (first here: the original value wins)
        key = draw(st.sampled_from(["job", "urn", "trace_id", "data", "meta", "attempts"]))
        extra = json.dumps({key: draw(st.sampled_from(WILD))}).encode()[1:-1]
        at_start = draw(st.booleans())
        body = b"{" + extra + b"," + body[1:] if at_start else body.rstrip()[:-1] + b"," + extra + b"}"
    return body


# No shrinking: each step would be a Spark job; the assertion prints the offending bodies.
@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(corpus=st.lists(bodies(), min_size=400, max_size=400))
def test_verdict_and_fields_equal_the_core_on_a_fuzz_corpus(spark: Any, corpus: list[bytes]) -> None:
    from babelq.spark.decode import decode

    fixed = [(CONFORMANCE / "fixtures" / "order-created.json").read_bytes() + tail for tail in TAILS]
    df = spark.createDataFrame([(i, b) for i, b in enumerate(fixed + corpus)], "n int, body binary")
    rows = decode(df, path_column="path").orderBy("n").collect()
    problems = _compare(rows)
    assert not problems, problems[:5]
    assert any(r["accepted"] for r in rows) and not all(r["accepted"] for r in rows)
    # Both paths were exercised, and the other two paths give the very same rows: the Spark SQL
    # fast path, and the exact path alone (data_json may differ in spelling, not in value).
    assert {r["path"] for r in rows} == {"scan", "exact"}
    for other in ({"scanner": False}, {"fast": False}):
        again = decode(df, **other).orderBy("n").collect()
        differ = [
            (_comparable(a), _comparable(b))
            for a, b in zip(rows, again, strict=True)
            if _comparable(a) != _comparable(b)
        ]
        assert not differ, (other, differ[:3])


def _comparable(row: Any) -> dict[str, Any]:
    """A decoded row without the path column, data_json parsed (its spelling depends on the path)."""
    values = row.asDict()
    values.pop("path", None)
    if values["data_json"] is not None:
        values["data_json"] = json.loads(values["data_json"])
    return values


@pytest.mark.parametrize("scanner", [True, False], ids=["jvm-scanner", "sql"])
def test_well_formed_bodies_take_a_fast_path_and_odd_ones_the_exact_one(spark: Any, scanner: bool) -> None:
    from babelq.spark.decode import decode

    fast = "scan" if scanner else "sql"
    good = make("urn:babel:orders:created", {"name": "Zoë", "tags": ["a"], "n": 1.5}, queue="q").encode()
    name = b'"Zo\xc3\xab"'
    cases = {
        good: fast,
        b"  " + good + b"\n": fast,
        good.replace(name, b'"Zo\\u00eb"'): fast,  # an escape that is safe
        good.replace(name, b'"\\ud83d\\ude00"'): "scan" if scanner else "exact",  # a surrogate pair
        good.replace(name, b'"\\ud800"'): "exact",  # lone surrogate: core says poison
        good.replace(name, b'"{x}"'): "scan" if scanner else "exact",  # a string starting with '{'
        good.replace(name, b"123456789012345678901234567890"): fast,  # an integer beyond 64 bits
        good.replace(name, b"1e400"): "exact" if scanner else "sql",  # only fits as infinity: poison
        good.replace(name, b"[" * 300 + b"]" * 300): "exact" if scanner else "sql",  # deeper than 256
        good + b',"x":{}': "exact",  # trailing content
        good[:-1]: "exact",
        b"[1]": "exact",
    }
    df = spark.createDataFrame([(b,) for b in cases], "body binary")
    rows = decode(df, path_column="path", scanner=scanner).collect()
    assert {bytes(r["body"]): r["path"] for r in rows} == cases
    for row in rows:
        body = bytes(row["body"])
        core_accepted, core_reason, _ = _core(body)
        if b"1e400" in body and not scanner:  # documented: Spark's own parser reads infinity there
            assert row["accepted"]
            continue
        assert row["accepted"] == core_accepted, body
        reason = row["reject_reason"]
        assert core_reason is None or core_reason.startswith(reason), (body, reason, core_reason)
    assert not _compare([r for r in rows if scanner or b"1e400" not in bytes(r["body"])])


REPEATED_KEYS = [
    b'{"job":"urn:a:b","job":5,"trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0}',
    b'{"job":5,"job":"urn:a:b","trace_id":"t","data":{"a":1,"a":2},"meta":{"schema_version":1},"attempts":0}',
    b'{"trace_id":"t","data":{"a":1,"a":2},"meta":{"schema_version":1},"attempts":0,"urn":5}',
    b'{"job":"urn:a:b","trace_id":"t","data":{},"meta":{"schema_version":2,"schema_version":1},"attempts":0}',
    b'{"job":"urn:a:b","trace_id":"t","data":{},"meta":{"schema_version":1,"schema_version":"1"},"attempts":0}',
    b'{"job":"urn:a:b","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0,"attempts":1.5}',
]


def test_repeated_keys_keep_the_last_value_as_the_core_does(spark: Any) -> None:
    from babelq.spark.decode import decode

    df = spark.createDataFrame([(b,) for b in REPEATED_KEYS], "body binary")
    rows = decode(df).collect()
    assert not _compare(rows)
    assert [r["accepted"] for r in rows] == [False, True, False, True, False, False]


def test_a_session_refusing_repeated_keys_is_warned_about(spark: Any) -> None:
    from babelq.spark.decode import decode
    from babelq.spark.session import DUPLICATE_KEYS_CONF

    df = spark.createDataFrame([(b,) for b in REPEATED_KEYS], "body binary")
    spark.conf.set(DUPLICATE_KEYS_CONF, "false")
    try:
        with pytest.warns(RuntimeWarning, match=DUPLICATE_KEYS_CONF):
            rows = decode(df, path_column="path").collect()
    finally:
        spark.conf.set(DUPLICATE_KEYS_CONF, "true")
    # the rows the exact path reads are called poison; the fast path still keeps the last value
    assert {r["reject_reason"] for r in rows if r["path"] == "exact"} == {"body is not JSON"}
    assert [r["accepted"] for r in rows if r["path"] != "exact"] == [True, True]


def test_encode_then_decode_round_trips_with_a_data_schema(spark: Any) -> None:
    from babelq.spark.decode import decode
    from babelq.spark.encode import encode

    df = spark.createDataFrame(
        [(1, "Zoë", 0.25), (2, 'a"b', None)], "order_id long, name string, ratio double"
    )
    encoded = encode(
        df, urn="urn:babel:spark:rt", data=["order_id", "name", "ratio"], queue="q", trace_id=sf.lit("t")
    )
    schema = df.schema
    out = decode(encoded.select("id", "body"), data_schema=schema).collect()
    assert [r["data"].asDict() for r in out] == [r.asDict() for r in df.collect()]
    assert all(
        r["accepted"] and r["trace_id"] == "t" and r["queue"] == "q" and r["lang"] == "python" for r in out
    )
    assert all(r["extensions"]["priority"] == 5 for r in out)


def test_string_body_column_and_leading_whitespace(spark: Any) -> None:
    from babelq.spark.decode import decode

    body = (CONFORMANCE / "fixtures" / "order-created.json").read_text()
    rows = decode(
        spark.createDataFrame([(body,), ("\n " + body + "\n",), (body + "}",)], "body string")
    ).collect()
    assert [r["accepted"] for r in rows] == [True, True, False]
    assert rows[2]["reject_reason"] == "body is not JSON"


# -- the core's limits on every path (issue 10) ----------------------------------------------------

LIMIT = 512
PATHS = [{}, {"scanner": False}, {"fast": False}]
PATH_IDS = ["jvm-scanner", "sql", "exact"]


def _deep(depth: int, leaf: str = "0", root: str = "{") -> bytes:
    """An envelope nested ``depth`` levels deep in total (the envelope object is level 1); with
    ``root="["`` the same nesting as a bare array."""
    if root == "[":
        return ("[" * depth + leaf + "]" * depth).encode()
    lists = depth - 2
    return (
        '{"job":"urn:babel:deep:nested","trace_id":"t","data":{"d":' + "[" * lists + leaf + "]" * lists
        + '},"meta":{"id":"m","queue":"q","lang":"go","schema_version":1,"created_at":1},"attempts":0}'
    ).encode()  # fmt: skip


DEEP_BODIES = [
    *[_deep(d) for d in (256, 257, 400, 511, 512, 513, 600, 998, 999, 1000, 1001, 1024, 1100)],
    *[_deep(d, leaf="NaN") for d in (513, 1001)],  # the core measures depth before it parses
    _deep(600, leaf='"\\ud800"'),  # a lone surrogate escape inside, deeper than the limit
    _deep(600).replace(b'"trace_id":"t"', b'"trace_id":"t","n":NaN'),  # NaN before the deep part
    _deep(200).replace(b'"t"', b'"' + b"[" * 700 + b'"'),  # brackets in a string do not count
    *[_deep(d, root="[") for d in (512, 513, 999)],  # deep and not an object: depth comes first
    _deep(513)[:-40],  # deep and cut short
]
DEEP_ACCEPTED = [True] * 5 + [False] * 8 + [False] * 4 + [True] + [False] * 4


def test_sparks_json_parser_stops_where_decode_expects(spark: Any) -> None:
    """decode pads a body so Spark's parser refuses exactly what is deeper than the limit; that
    relies on the parser's own limit, which a Spark upgrade could move."""
    from babelq.spark.decode import SPARK_JSON_MAX_DEPTH

    texts = [("[" * d + "]" * d,) for d in (SPARK_JSON_MAX_DEPTH, SPARK_JSON_MAX_DEPTH + 1)]
    df = spark.createDataFrame(texts, "s string")
    parsed = [r[0] for r in df.select(sf.try_parse_json("s").isNotNull()).collect()]
    assert parsed == [True, False]


@pytest.mark.parametrize("options", PATHS, ids=PATH_IDS)
def test_nesting_beyond_the_cores_limit_is_poison_on_every_path(
    spark: Any, options: dict[str, Any]
) -> None:
    from babelq.spark.decode import decode

    assert [_core(b)[0] for b in DEEP_BODIES] == DEEP_ACCEPTED
    df = spark.createDataFrame([(i, b) for i, b in enumerate(DEEP_BODIES)], "n int, body binary")
    rows = decode(df, path_column="path", **options).orderBy("n").collect()
    assert [r["accepted"] for r in rows] == DEEP_ACCEPTED
    assert not _compare(rows)  # reasons too: "body is not JSON", the core's adding why
    if not options:  # the scanner's own poison (NaN) yields to the depth, as in the core
        assert rows[16]["reject_reason"] == f"body is not JSON: nested too deeply (more than {LIMIT} levels)"


INT64_MAX = 2**63 - 1


def _frame(**members: str) -> bytes:
    parts = {"job": '"urn:babel:orders:created"', "trace_id": '"t"', "data": '{"n":1}',
             "meta": '{"id":"m","queue":"q","lang":"go","schema_version":1,"created_at":1}',
             "attempts": "0"}  # fmt: skip
    parts.update(members)
    return ("{" + ",".join(f'"{k}":{v}' for k, v in parts.items()) + "}").encode()


def _meta(created_at: str) -> str:
    return '{"id":"m","queue":"q","lang":"go","schema_version":1,"created_at":' + created_at + "}"


def _block(**members: str) -> str:
    fields = {"reason": '"failed"', "error": '"e"', "exception": "null", "failed_at": "1",
              "original_queue": '"q"', "attempts": "3", "lang": '"go"'}  # fmt: skip
    fields.update(members)
    return "{" + ",".join(f'"{k}":{v}' for k, v in fields.items()) + "}"


INT64_BODIES = [
    _frame(attempts=str(INT64_MAX)),
    _frame(attempts=str(-(2**63))),
    _frame(attempts=str(INT64_MAX + 1)),
    _frame(attempts=str(2**64)),
    _frame(attempts="1" * 40),
    _frame(attempts="-" + "9" * 45),
    _frame(meta=_meta("null")),
    _frame(meta='{"schema_version":1}'),
    _frame(meta=_meta(str(INT64_MAX))),
    _frame(meta=_meta(str(INT64_MAX + 1))),
    _frame(meta=_meta("7" * 41)),
    _frame(meta=_meta('"1749132727000"')),
    _frame(meta=_meta("1.5")),
    _frame(meta=_meta("1.0")),
    _frame(meta=_meta("true")),
    _frame(meta=_meta("{}")),
    _frame(dead_letter="null"),
    _frame(dead_letter="{}"),
    _frame(dead_letter=_block()),
    _frame(dead_letter='"failed"'),
    _frame(dead_letter="[1]"),
    _frame(dead_letter="0"),
    _frame(dead_letter="1" * 40),
    _frame(dead_letter="false"),
    _frame(dead_letter=_block(failed_at="null", attempts="null")),
    _frame(dead_letter=_block(failed_at=str(INT64_MAX), attempts=str(-(2**63)))),
    _frame(dead_letter=_block(failed_at=str(INT64_MAX + 1))),
    _frame(dead_letter=_block(failed_at='"yesterday"')),
    _frame(dead_letter=_block(failed_at="1e3")),
    _frame(dead_letter=_block(attempts=str(2**64))),
    _frame(dead_letter=_block(attempts="[]")),
    _frame(meta=_meta('"x"'), dead_letter="5"),  # the first broken rule is named
]


@pytest.mark.parametrize("options", PATHS, ids=PATH_IDS)
def test_int64_members_get_the_cores_verdict_and_reason_on_every_path(
    spark: Any, options: dict[str, Any]
) -> None:
    from babelq.spark.decode import decode

    df = spark.createDataFrame([(i, b) for i, b in enumerate(INT64_BODIES)], "n int, body binary")
    rows = decode(df, path_column="path", **options).orderBy("n").collect()
    assert not _compare(rows)
    assert [r["accepted"] for r in rows] == [_core(b)[0] for b in INT64_BODIES]
    assert sum(r["accepted"] for r in rows) == 10
    assert rows[0]["attempts"] == INT64_MAX and rows[8]["created_at"] == INT64_MAX
    if not options:
        assert [r["path"] for r in rows if r["accepted"]] == ["scan"] * 10


@pytest.mark.parametrize("typed", [False, True], ids=["data_json", "data-struct"])
def test_decode_compiles_whole_stage(spark: Any, typed: bool) -> None:
    """Every projection of decode stays under whole-stage code generation (the benchmark's data
    type): an expression without generated code, or a projection carrying more than Spark's 100
    nested fields, would run interpreted, 20-40% slower, and nothing else would say so."""
    from babelq.spark.decode import decode

    data_type = T.StructType([
        T.StructField("order_id", T.LongType()), T.StructField("amount_cents", T.LongType()),
        T.StructField("currency", T.StringType()),
        T.StructField("customer", T.StructType([T.StructField("name", T.StringType()),
                                                T.StructField("email", T.StringType())])),
        T.StructField("ratio", T.DoubleType()), T.StructField("tags", T.ArrayType(T.StringType())),
    ])  # fmt: skip
    body = make("urn:babel:orders:created", {"order_id": 1}, queue="q").encode()
    df = spark.createDataFrame([(body,)], "body binary")
    decoded = decode(df, data_schema=data_type) if typed else decode(df)
    plan = decoded._jdf.queryExecution().executedPlan().toString()
    projects = [line.strip().removeprefix("+- ") for line in plan.splitlines() if "Project [" in line]
    assert projects and all(p.startswith("*(") for p in projects), plan[:2000]


def _identity(job: str | None, urn: str | None) -> bytes:
    members = {"job": job, "urn": urn, "trace_id": '"t"', "data": '{"n":1}',
               "meta": '{"id":"m","schema_version":1}', "attempts": "0"}  # fmt: skip
    return ("{" + ",".join(f'"{k}":{v}' for k, v in members.items() if v is not None) + "}").encode()


ALIAS = '"urn:babel:orders:created"'
IDENTITY_BODIES = [
    _identity('"urn:babel:a:b"', ALIAS),
    _identity(None, ALIAS),
    _identity("null", ALIAS),
    _identity("5", ALIAS),
    _identity('""', ALIAS),
    _identity('" "', ALIAS),
    _identity("{}", ALIAS),
    _identity("true", None),
    _identity(None, None),
    _identity("null", "null"),
]


@pytest.mark.parametrize("options", PATHS, ids=PATH_IDS)
def test_the_urn_alias_counts_only_when_job_is_absent_on_every_path(
    spark: Any, options: dict[str, Any]
) -> None:
    """Seed 004: "Read the URN from job, accepting urn as an alias if job is absent": the same URN,
    verdict and reason as the core on every path, for a job that is present but no URN too."""
    from babelq.spark.decode import decode

    df = spark.createDataFrame([(i, b) for i, b in enumerate(IDENTITY_BODIES)], "n int, body binary")
    rows = decode(df, **options).orderBy("n").collect()
    assert not _compare(rows)
    assert [r["urn"] for r in rows] == ["urn:babel:a:b", *["urn:babel:orders:created"] * 2, *[""] * 7]


def test_an_integer_only_infinity_could_hold_is_poison_on_the_scanner_path(spark: Any) -> None:
    """As in the core (tests/envelope/test_env_limits.py): 308 digits decode, 309 are poison."""
    from babelq.spark.decode import decode

    bodies = [_frame(data='{"n":' + sign + "9" * digits + "}")
              for digits in (308, 309, 400) for sign in ("", "-")]  # fmt: skip
    df = spark.createDataFrame([(i, b) for i, b in enumerate(bodies)], "n int, body binary")
    rows = decode(df, path_column="path").orderBy("n").collect()
    assert not _compare(rows)
    assert [r["accepted"] for r in rows] == [True, True, False, False, False, False]
    assert all(r["reject_reason"].startswith("body is not usable JSON") for r in rows[2:])

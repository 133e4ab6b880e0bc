"""What a person sees when a command fails: one line, exit code 2, no traceback, no password.

Every row runs the real ``babelq`` executable in a subprocess, exactly as a shell would, and
checks the contract of :func:`babelq.cli.main.main`: stderr holds exactly one non-empty line,
``babelq <command>: error: ...``, naming the input; the exit code is 2; there is no
``Traceback``; and when the command line (or ``$BABELQ_BROKER``) holds a URL with a password,
that password appears nowhere in stdout or stderr, also with ``-v`` (which adds the traceback).

Spark rows (ingest, settle) start a JVM each, so they are few and marked slow. They run
with babelq's own Spark log settings (the tests' ``SPARK_CONF_DIR``, which has no log4j2 file), which keep
Spark's records of a failure off the screen. babelq's own timed progress lines are not error
output and are set aside for those rows only; a timed Spark log record is not.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from babelq.cli import main as cli_main
from babelq.errors import BabelqError, ConfigurationError
from conftest import CONFORMANCE_DIR, ROOT, require_service
from payment_fixtures import publish_transfers
from spark_defaults import isolated_env

BABELQ = ROOT / ".venv" / "bin" / "babelq"
SECRET = "s3cret"
DEEP = 5_000
APP = "babelq.runtime:App"  # an App without a transport: the broker comes from --url / $BABELQ_BROKER

# What the Spark rows' stderr may hold besides babelq's error line (see the module docstring).
_JVM_LAUNCHER = re.compile(r"^WARNING: Using incubator modules")
_PROGRESS = re.compile(r"^\d\d:\d\d:\d\d (?!(?:FATAL|ERROR|WARN|INFO|DEBUG) )")


@dataclass(frozen=True)
class Case:
    """One failing command. ``{tmp}`` in ``args``/``env`` is the test's working directory."""

    args: tuple[str, ...]
    says: tuple[str, ...] = ()  # what the error line must contain (the input it names)
    unsaid: tuple[str, ...] = ()  # what it must not (an option that was not given)
    stdin: bytes = b""
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)  # written into {tmp} first
    dirs: tuple[str, ...] = ()  # made in {tmp} first
    absent: tuple[str, ...] = ()  # paths under {tmp} the command must not create
    service: str | None = None  # a live service the row needs (conftest.require_service)
    spark: bool = False

    @property
    def command(self) -> str:
        return next(arg for arg in self.args if not arg.startswith("-"))


def run_babelq(
    args: list[str], *, cwd: Path, stdin: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    command = [str(BABELQ)] if BABELQ.exists() else [sys.executable, "-m", "babelq.cli.main"]
    full_env = isolated_env(("BABELQ_BROKER",))
    full_env.update(env or {})
    return subprocess.run(
        [*command, *args], input=stdin, capture_output=True, cwd=cwd, env=full_env, timeout=240, check=False
    )


def error_lines(stderr: bytes, *, spark: bool) -> list[str]:
    lines = [line for line in stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    if spark:
        lines = [line for line in lines if not (_JVM_LAUNCHER.match(line) or _PROGRESS.match(line))]
    return lines


def _redis(url: str) -> tuple[str, ...]:
    return ("worker", "--app", APP, "--until-empty", "--url", url)


# Redis refuses a user it does not know: the password is checked, so the broker is reachable but wrong.
REFUSING_REDIS = f"redis://nosuchuser:{SECRET}@127.0.0.1:6379/15"
FILES_FOR_SPARK = {
    "p.csv": b"payment_reference,amount_cents,currency,debtor_bsb,debtor_account,creditor_bsb,"
    b"creditor_account\nr1,100,AUD,062-000,12345678,062-001,87654321\n",
    "orders.py": (ROOT / "examples" / "orders_pipeline.py").read_bytes(),
}
GARBAGE = bytes((i * 97 + 13) % 256 for i in range(4096))
INGEST = ("--broker", "sqlite:///{tmp}/q.db", "--rejects", "{tmp}/rejects")
SETTLE = ("settle", "--broker", "sqlite:///{tmp}/q.db", "--checkpoint", "{tmp}/checkpoint")

CASES = [
    # -- worker: --app ---------------------------------------------------------------------------
    pytest.param(
        Case(("worker", "--app", "nosuch:app"), says=("'nosuch:app'", "no module named 'nosuch'")),
        id="worker-app-no-such-module",
    ),
    pytest.param(
        Case(("worker", "--app", "babelq:missing"), says=("'babelq:missing'", "no attribute")),
        id="worker-app-no-such-attribute",
    ),
    pytest.param(
        Case(("worker", "--app", "nocolon"), says=("'nocolon'", "MODULE:ATTR")), id="worker-app-no-colon"
    ),
    pytest.param(
        Case(
            ("worker", "--app", "raising:app"),
            says=("'raising:app'", "RuntimeError: boom at import"),
            files={"raising.py": b'raise RuntimeError("boom at import")\n'},
        ),
        id="worker-app-module-raises-on-import",
    ),
    # -- worker: brokers ---------------------------------------------------------------------------
    pytest.param(
        Case(_redis(f"redis://:{SECRET}@127.0.0.1:1/15"), says=("127.0.0.1:1",)), id="redis-unreachable"
    ),
    pytest.param(
        Case(
            ("worker", "--app", APP, "--until-empty"),
            says=("127.0.0.1:1",),
            env={"BABELQ_BROKER": f"redis://:{SECRET}@127.0.0.1:1/15"},
        ),
        id="redis-unreachable-from-BABELQ_BROKER",
    ),
    pytest.param(
        Case(_redis(f"redis://nosuchuser:{SECRET}@127.0.0.1:6379/15"), says=("password",), service="redis"),
        id="redis-wrong-password",
    ),
    pytest.param(Case(_redis("sqlite:///proc/q.db"), says=("/proc/q.db",)), id="sqlite-under-proc"),
    pytest.param(
        Case(
            _redis("sqlite:///{tmp}/nonexistent/dir/q.db"),
            says=("nonexistent/dir", "does not exist"),
            absent=("nonexistent",),
        ),
        id="sqlite-missing-directory",
    ),
    pytest.param(
        Case(_redis(f"amqp://guest:{SECRET}@127.0.0.1:1/"), says=("127.0.0.1:1",)), id="amqp-unreachable"
    ),
    pytest.param(
        Case(_redis(f"amqp://guest:{SECRET}@127.0.0.1:1/?prefetch=abc"), says=("prefetch", "'abc'")),
        id="amqp-option-not-a-number",
    ),
    # -- a password left in a path (a URL read as a path) is masked wherever the error quotes it ---------
    *[
        pytest.param(Case(args, says=("does not exist", "user:***@")), id=f"{args[0]}-password-in-a-path-{n}")
        for n, url in enumerate([f"user:{SECRET}@/nonexistent/x.db",
                                 f"sqlite:/user:{SECRET}@/nonexistent/x.db"])
        for args in [
            ("relay", "--outbox", url, "--broker", "memory://", "--once"),
            ("settle", "--ledger", url, "--broker", "sqlite:///{tmp}/q.db", "--checkpoint", "{tmp}/ck"),
        ]
    ],
    # -- inspect / encode ----------------------------------------------------------------------------
    pytest.param(
        Case(
            ("inspect", "--array", "{tmp}/deep.json"),
            says=("nested too deeply",),
            files={"deep.json": b"[" * DEEP + b"]" * DEEP},
        ),
        id="inspect-array-nested-5000",
    ),
    pytest.param(
        Case(
            ("encode", "urn:babel:a:b", "-"),
            says=("DATA_JSON", "nested too deeply"),
            stdin=b'{"a":' * DEEP + b"1" + b"}" * DEEP,
        ),
        id="encode-stdin-nested-5000",
    ),
    pytest.param(
        Case(("inspect", "{tmp}/missing.ndjson"), says=("missing.ndjson",)), id="inspect-missing-file"
    ),
    # -- schema: a registry that cannot be read -------------------------------------------------------
    pytest.param(
        Case(("schema", "check", "--registry", "{tmp}/none.json"), says=("--registry", "none.json")),
        id="schema-registry-missing",
    ),
    pytest.param(
        Case(
            ("schema", "gdpr", "--registry", "{tmp}/registry.json"),
            says=("registry.json", "schemas[0] (urn:babel:a:b)", "schema file gone.json", "cannot read"),
            files={"registry.json": b'{"schemas": [{"urn": "urn:babel:a:b", "schema": "gone.json"}]}'},
        ),
        id="schema-registry-entry-file-missing",
    ),
    pytest.param(
        Case(
            ("schema", "compat", "{tmp}/old.json", "{tmp}/new.json"),
            says=("NEW", "new.json", "not JSON"),
            files={"old.json": b'{"type": "object"}', "new.json": b'{"type": '},
        ),
        id="schema-compat-new-not-json",
    ),
    # -- conformance --transport ------------------------------------------------------------------------
    pytest.param(
        Case(
            ("conformance", str(CONFORMANCE_DIR), "--transport", "sqlite:///proc/q.db"), says=("/proc/q.db",)
        ),
        id="conformance-transport-unopenable",
    ),
    pytest.param(
        Case(
            ("conformance", str(CONFORMANCE_DIR), "--transport", f"redis://:{SECRET}@127.0.0.1:1/15"),
            says=("127.0.0.1:1",),
        ),
        id="conformance-transport-unreachable",
    ),
    # -- dlq --------------------------------------------------------------------------------------------
    pytest.param(
        Case(
            ("dlq", "--broker", f"redis://:{SECRET}@127.0.0.1:1/15", "--queue", "payments"),
            says=("127.0.0.1:1",),
        ),
        id="dlq-redis-unreachable",
    ),
    # -- settle -------------------------------------------------------------------------------------------
    pytest.param(
        Case(
            (*SETTLE, "--ledger", f"postgresql://u:{SECRET}@127.0.0.1:1/x"), says=("127.0.0.1",), spark=True
        ),
        id="settle-ledger-unreachable",
    ),
    pytest.param(
        Case(
            (
                "settle",
                "--broker",
                "sqlite:///{tmp}/q.db",
                "--ledger",
                "{tmp}/ledger.db",
                "--checkpoint",
                "{tmp}/afile",
            ),
            says=("afile", "not a directory"),
            files={"afile": b"not a directory\n"},
            spark=True,
        ),
        id="settle-fails-inside-spark",
        marks=pytest.mark.slow,
    ),
    # -- settle: --bank, refused before the ledger is opened and before Spark starts ----------------------
    *[
        pytest.param(
            Case((*SETTLE, "--ledger", "{tmp}/ledger.db", "--bank", bank), says=("--bank", *says),
                 files={"bank.py": b"RATE = 1\n\n\ndef post(payment, extra):\n    pass\n"},
                 absent=("ledger.db", "checkpoint")),
            id=f"settle-bank-{name}",
        )
        for name, bank, says in [
            ("no-colon", "mybank", ("'mybank'", "MODULE:ATTR")),
            ("no-such-module", "nosuchbank:post", ("no module named 'nosuchbank'",)),
            ("no-such-file", "./missing.py:post", ("no such file", "missing.py")),
            ("no-such-attribute", "./bank.py:nothing", ("has no attribute 'nothing'",)),
            ("not-a-bank", "./bank.py:RATE", ("'RATE' is of type int", "post(payment)")),
            ("wrong-signature", "./bank.py:post", ("post must take one argument",)),
        ]
    ],
    # -- ingest -------------------------------------------------------------------------------------------
    pytest.param(
        Case(("ingest", "{tmp}/missing.csv", *INGEST), says=("missing.csv",), spark=True),
        id="ingest-missing-path",
        marks=pytest.mark.slow,
    ),
    pytest.param(
        Case(("ingest", "{tmp}/adir", *INGEST), says=("adir", "directory"), dirs=("adir",), spark=True),
        id="ingest-a-directory",
        marks=pytest.mark.slow,
    ),
    pytest.param(
        Case(
            ("ingest", "{tmp}/wrong.csv", *INGEST),
            says=("wrong.csv", "missing column", "payment_reference"),
            files={"wrong.csv": b"a,b\n1,2\n"},
            spark=True,
        ),
        id="ingest-wrong-columns",
        marks=pytest.mark.slow,
    ),
    # -- every Spark command opens its broker before Spark starts: one line, no JVM ---------------------
    *[
        pytest.param(
            Case(args, says=("--broker", "127.0.0.1:6379", "password"), files=FILES_FOR_SPARK,
                 service="redis", absent=absent),
            id=f"{args[0]}-broker-refuses-before-spark",
        )
        for args, absent in [
            (("ingest", "{tmp}/p.csv", "--broker", REFUSING_REDIS, "--rejects", "{tmp}/rejects"),
             ("rejects",)),
            (("publish", "{tmp}/p.csv", "--urn", "urn:babel:orders:created", "--broker", REFUSING_REDIS,
              "--rejects", "{tmp}/rejects"), ("rejects",)),
            (("settle", "--broker", REFUSING_REDIS, "--ledger", "{tmp}/ledger.db", "--checkpoint",
              "{tmp}/checkpoint"), ("checkpoint",)),
            (("consume", "--app", "orders:pipeline", "--broker", REFUSING_REDIS, "--sink", "{tmp}/sink.db",
              "--checkpoint", "{tmp}/checkpoint"), ("checkpoint",)),
            (("demo", "--rows", "10", "--broker", REFUSING_REDIS, "--out", "{tmp}/out"), ("out",)),
        ]
    ],
    # -- the batch journal defaults to beside --rejects: its error names --rejects, the option given ------
    *[
        pytest.param(
            Case((command, "{tmp}/p.csv", *urn, "--broker", "sqlite:///{tmp}/q.db", "--rejects",
                  "{tmp}/out/ing/rejects"),
                 says=("--rejects", "{tmp}/out/ing does not exist"), unsaid=("--journal:",),
                 files=FILES_FOR_SPARK),
            id=f"{command}-rejects-in-a-missing-directory",
        )
        for command, urn in [("ingest", ()), ("publish", ("--urn", "urn:babel:orders:created"))]
    ],
    pytest.param(
        Case(
            ("ingest", "{tmp}/garbage.csv", *INGEST),
            says=("garbage.csv",),
            files={"garbage.csv": GARBAGE},
            spark=True,
        ),
        id="ingest-binary-garbage",
        marks=pytest.mark.slow,
    ),
    # -- expire ---------------------------------------------------------------------------------------------
    pytest.param(
        Case(
            ("expire", "--broker", f"amqp://guest:{SECRET}@127.0.0.1:1/", "--queue", "payments"),
            says=("amqp://guest:***@127.0.0.1:1/", "cannot show a queued message without delivering it",
                  "dead-letter exchange"),
        ),
        id="expire-amqp-cannot-scan",
    ),
    pytest.param(
        Case(
            ("expire", "--broker", "sqs://k:v@127.0.0.1:1/?region=us-east-1", "--queue", "payments"),
            says=("sqs://", "cannot show a queued message without receiving it"),
        ),
        id="expire-sqs-cannot-scan",
    ),
    pytest.param(
        Case(
            ("expire", "--broker", f"redis://:{SECRET}@127.0.0.1:1/15", "--queue", "q"), says=("127.0.0.1:1",)
        ),
        id="expire-redis-unreachable",
    ),
    pytest.param(
        Case(
            ("expire", "--broker", "sqlite:///{tmp}/q.db", "--queue", "q", "--every", "0"), says=("--every",)
        ),
        id="expire-every-zero",
    ),
    pytest.param(
        Case(("expire", "--broker", "sqlite:///{tmp}/q.db", "--queue", "a,,b"), says=("--queue",)),
        id="expire-empty-queue-name",
    ),
    pytest.param(
        Case(
            ("worker", "--app", APP, "--broker", "sqlite:///{tmp}/q.db", "--until-empty",
             "--expire-every", "-1"),
            says=("expire_every", "-1"),
        ),
        id="worker-expire-every-negative",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_an_error_is_one_line_with_exit_code_2(case: Case, tmp_path: Path) -> None:
    if case.service:
        require_service(case.service)
    for name, content in case.files.items():
        (tmp_path / name).write_bytes(content)
    for name in case.dirs:
        (tmp_path / name).mkdir()
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in case.args]
    env = {key: value.replace("{tmp}", str(tmp_path)) for key, value in case.env.items()}

    proc = run_babelq(args, cwd=tmp_path, stdin=case.stdin, env=env)
    stderr = proc.stderr.decode("utf-8", "replace")
    assert "Traceback" not in stderr
    lines = error_lines(proc.stderr, spark=case.spark)
    assert len(lines) == 1, stderr
    [line] = lines
    assert line.startswith(f"babelq {case.command}: error: "), line
    assert len(line) <= cli_main.MAX_ERROR_LINE + 100
    for fragment in case.says:
        assert fragment.replace("{tmp}", str(tmp_path)) in line, line
    for fragment in case.unsaid:
        assert fragment not in line, line
    assert proc.returncode == 2, (proc.returncode, stderr)
    for name in case.absent:
        assert not (tmp_path / name).exists(), f"{name} was created"

    secret_given = SECRET in " ".join(args) or any(SECRET in value for value in env.values())
    if secret_given:
        assert SECRET.encode() not in proc.stdout + proc.stderr
        verbose = run_babelq(["-v", *args], cwd=tmp_path, stdin=case.stdin, env=env)
        assert SECRET.encode() not in verbose.stdout + verbose.stderr, verbose.stderr.decode()
        assert verbose.returncode == 2
        assert any(
            line.startswith(f"babelq {case.command}: error: ")
            for line in error_lines(verbose.stderr, spark=case.spark)
        )


def test_verbose_adds_the_traceback_and_still_ends_with_the_line(tmp_path: Path) -> None:
    plain = run_babelq(["worker", "--app", "nosuch:app"], cwd=tmp_path)
    verbose = run_babelq(["-v", "worker", "--app", "nosuch:app"], cwd=tmp_path)
    assert plain.returncode == verbose.returncode == 2
    text = verbose.stderr.decode()
    assert "Traceback (most recent call last)" in text
    assert "ModuleNotFoundError" in text  # the cause is part of the traceback
    assert text.strip().splitlines()[-1] == plain.stderr.decode().strip()


def test_an_unexpected_error_keeps_its_type_and_says_how_to_see_more(tmp_path: Path) -> None:
    """A bug (not a BabelqError) is still one line; the type is kept and -v is offered."""
    (tmp_path / "buggy.py").write_text(
        "from babelq.runtime import App\n"
        "class Broken(App):\n"
        "    def drain(self, *args, **kwargs):\n"
        "        raise KeyError('lost')\n"
        "app = Broken('memory://')\n"
    )
    proc = run_babelq(["worker", "--app", "buggy:app", "--until-empty"], cwd=tmp_path)
    assert proc.returncode == 2
    [line] = proc.stderr.decode().splitlines()
    assert line == "babelq worker: error: KeyError: 'lost' (babelq -v shows the traceback)"


# -- inspect: empty input is one poison body ---------------------------------------------------------
@pytest.mark.parametrize("raw", [b"", b"\n\n", b"  \r\n"], ids=["empty", "newlines", "blanks"])
def test_inspect_calls_empty_input_one_poison_body(raw: bytes, tmp_path: Path) -> None:
    """The runtime dead-letters an empty body as poison; inspect must not answer "no bodies"."""
    path = tmp_path / "bodies"
    path.write_bytes(raw)
    text = run_babelq(["inspect", str(path)], cwd=tmp_path)
    assert text.returncode == 1
    assert text.stderr == b""
    out = text.stdout.decode()
    assert "[1] poison: body is not JSON" in out
    assert "1 body: 0 accepted, 0 rejected, 1 poison" in out
    as_json = run_babelq(["inspect", "--json", "-"], cwd=tmp_path, stdin=raw)
    assert as_json.returncode == 1
    [report] = json.loads(as_json.stdout)
    assert (report["verdict"], report["size"]) == ("poison", len(raw))


def _nested_body(levels: int) -> bytes:
    """An envelope whose data holds ``levels`` nested objects (plus the envelope's own two)."""
    from babelq.envelope import make

    deep = b'{"a":' * levels + b"1" + b"}" * levels
    return make("urn:babel:a:b", {"deep": 0}).encode().replace(b'{"deep":0}', deep)


def _deepest_accepted() -> int:
    """The most nesting inside data that the decoder still accepts (found, not assumed)."""
    from babelq.envelope import decode
    from babelq.errors import DecodeError

    def accepted(levels: int) -> bool:
        try:
            return decode(_nested_body(levels)).accepts()
        except DecodeError:
            return False

    low, high = 1, DEEP
    assert accepted(low) and not accepted(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if accepted(middle) else (low, middle)
    return low


def test_inspect_prints_the_deepest_body_a_consumer_accepts(tmp_path: Path) -> None:
    """Rendering (the pretty document, --json) uses Python's recursive json encoder; it must not
    crash on any body the decoder accepts, however close to the limit."""
    path = tmp_path / "deep.json"
    path.write_bytes(_nested_body(_deepest_accepted()))
    for mode in ([], ["--json"]):
        proc = run_babelq(["inspect", *mode, str(path)], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr.decode()
        assert proc.stderr == b""


# -- worker: $BABELQ_BROKER ---------------------------------------------------------------------------
APP_MODULE = """\
from babelq.runtime import App

app = App(queue="orders")

@app.handler("urn:babel:orders:created")
def created(message):
    pass
"""


def _one_order(url: str) -> None:
    from babelq.envelope import make
    from babelq.transports import open_transport

    transport = open_transport(url)
    try:
        transport.publish(
            "orders", make("urn:babel:orders:created", {"order_id": 1}, queue="orders").encode()
        )
    finally:
        transport.close()


def test_worker_takes_its_broker_from_BABELQ_BROKER(tmp_path: Path) -> None:
    (tmp_path / "service.py").write_text(APP_MODULE)
    url = f"sqlite:///{tmp_path}/q.db"
    _one_order(url)
    proc = run_babelq(
        ["worker", "--app", "service:app", "--until-empty"], cwd=tmp_path, env={"BABELQ_BROKER": url}
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert json.loads(proc.stdout)["handled"] == 1


def test_worker_url_wins_over_BABELQ_BROKER(tmp_path: Path) -> None:
    (tmp_path / "service.py").write_text(APP_MODULE)
    url = f"sqlite:///{tmp_path}/q.db"
    _one_order(url)
    proc = run_babelq(
        ["worker", "--app", "service:app", "--until-empty", "--url", url],
        cwd=tmp_path,
        env={"BABELQ_BROKER": f"redis://:{SECRET}@127.0.0.1:1/15"},
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert json.loads(proc.stdout)["handled"] == 1


# -- the ledger's table prefix (settle has no prefix option) -----------------------------------------
def test_a_ledger_prefix_starting_with_a_digit_is_a_configuration_error(tmp_path: Path) -> None:
    """Table names are built from the prefix; "1x" would be an SQL syntax error at first use."""
    from babelq.pipelines.ledger import open_ledger

    with pytest.raises(ConfigurationError, match="1x"):
        open_ledger(tmp_path / "ledger.db", prefix="1x")


# -- the boundary in-process ------------------------------------------------------------------------
def test_keyboard_interrupt_exits_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from babelq.cli.commands import worker

    def interrupted(_args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(worker, "run", interrupted)
    assert cli_main.main(["worker", "--app", "x:y"]) == 130
    assert capsys.readouterr().err == "babelq worker: interrupted\n"


def test_a_babelq_error_is_printed_as_it_is(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from babelq.cli.commands import worker

    def refuses(_args: object) -> int:
        raise BabelqError(f"queue 'orders' on redis://:{SECRET}@db:6379/0 is gone")

    monkeypatch.setattr(worker, "run", refuses)
    assert cli_main.main(["worker", "--app", "x:y"]) == 2
    assert (
        capsys.readouterr().err == "babelq worker: error: queue 'orders' on redis://:***@db:6379/0 is gone\n"
    )


# What a failed Spark streaming query's text looks like (trimmed from a real settle run whose
# ledger was down): Py4J's wrapper, the Python worker's traceback, then the query's state dump.
SETTLE_QUERY_FAILED = (
    (
        "settle query failed: An exception was raised by the Python Proxy. "
        "Return Message: Traceback (most recent call last):\n"
    )
    + """\
  File "/venv/lib/python3.11/site-packages/py4j/clientserver.py", line 644, in _call_proxy
    return_value = getattr(self.pool[obj_id], method)(*params)
  File "/src/babelq/pipelines/settle/query.py", line 72, in process_batch
    rows = rows.collect()
pyspark.errors.exceptions.captured.PythonException: An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/src/babelq/pipelines/ledger.py", line 150, in __init__
    self.conn = psycopg.connect(url, autocommit=False)
psycopg.OperationalError: connection failed: connection to server at "127.0.0.1", port 1 failed: refused
\tIs the server running on that host and accepting TCP/IP connections? postgresql://u:s3cret@127.0.0.1:1/x

=== Streaming Query ===
Identifier: babelq-settle-payments [id = 604300e7, runId = b5ca407b]
Current State: ACTIVE
Thread State: RUNNABLE

Logical Plan:
~WriteToMicroBatchDataSourceV1 ForeachBatchSink, [checkpointLocation=/tmp/ck], Append
"""
)

PY4J_JAVA_ERROR = """\
An error occurred while calling o65.start.
: org.apache.spark.SparkException: Job aborted.
\tat org.apache.spark.sql.execution.streaming.StreamExecution.start(StreamExecution.scala:1)
\tat java.base/java.lang.Thread.run(Thread.java:840)
Caused by: java.net.ConnectException: Connection refused to amqp://guest:s3cret@127.0.0.1:1/
\tat java.base/sun.nio.ch.Net.connect(Net.java:1)
"""


class Py4JJavaError(Exception):
    """Stands in for py4j.protocol.Py4JJavaError: its str() is the Java stack trace."""


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (
            BabelqError(SETTLE_QUERY_FAILED),
            'settle query failed: OperationalError: connection failed: connection to server at "127.0.0.1", '
            "port 1 failed: refused",
        ),
        (
            Py4JJavaError(PY4J_JAVA_ERROR),
            "Py4JJavaError: ConnectException: Connection refused to amqp://guest:***@127.0.0.1:1/",
        ),
        (KeyError("lost"), "KeyError: 'lost'"),
        (ValueError(""), "ValueError"),
        (ConfigurationError("--url: no broker URL given"), "--url: no broker URL given"),
        (BabelqError("first line\n  second line"), "first line"),
        (BabelqError("tab\tand   spaces"), "tab and spaces"),
    ],
    ids=[
        "spark-query",
        "py4j-java-error",
        "keyerror",
        "empty-message",
        "babelq-error",
        "two-lines",
        "whitespace",
    ],
)
def test_error_line(exc: BaseException, expected: str) -> None:
    line = cli_main.error_line(exc)
    assert line == expected
    assert SECRET not in line


def test_error_line_is_capped_after_redacting() -> None:
    exc = BabelqError(f"cannot reach redis://:{SECRET}@host:6379/0 " + "x" * 2_000)
    line = cli_main.error_line(exc)
    assert len(line) == cli_main.MAX_ERROR_LINE
    assert line.startswith("cannot reach redis://:***@host:6379/0 ") and line.endswith("...")


# -- a ledger whose disk fills up while settle runs ---------------------------------------------------
_OUTAGE_WAIT = re.compile(r"^(ledger|sink) unavailable \(attempt \d+, retrying in [\d.]+ s\): ")


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs (needs the right to mount: root in a container that allows it)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)],
                             capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.slow
@pytest.mark.spark
def test_a_ledger_disk_that_fills_up_under_settle_is_one_error_line(tmp_path: Path, tiny_disk: Path) -> None:
    """The ledger opens (so the check before Spark passes), then its disk fills while Spark's tasks
    post: settle waits the outage out (one logged line per attempt, which are not errors) for
    ``--outage-timeout`` seconds, then fails with one line naming the ledger and the option.
    Spark's own ERROR records and stack traces of the failed tasks, and Py4J's log of the failed
    batch, stay off the screen."""
    url = f"sqlite:///{tmp_path}/q.db"
    publish_transfers(url, "payments", 3_000)  # more than 256 KiB of ledger rows
    proc = subprocess.run(
        [str(BABELQ), "settle", "--broker", url, "--ledger", str(tiny_disk / "ledger.db"), "--checkpoint",
         str(tmp_path / "ck"), "--progress", "none", "--outage-timeout", "3"],
        capture_output=True, cwd=tmp_path, timeout=600, check=False,
        env=isolated_env(("BABELQ_BROKER",)),
    )
    stderr = proc.stderr.decode("utf-8", "replace")
    lines = [line for line in error_lines(proc.stderr, spark=True) if not _OUTAGE_WAIT.match(line)]
    assert len(lines) == 1, stderr[-5000:]
    assert lines[0].startswith("babelq settle: error: ") and "database or disk is full" in lines[0], lines[0]
    assert "--outage-timeout" in lines[0], lines[0]
    assert str(tiny_disk / "ledger.db") in lines[0]
    assert "Traceback" not in stderr and "\tat " not in stderr
    assert proc.returncode == 2

"""Shared fixtures.

Live services: a test that needs Redis, RabbitMQ, PostgreSQL... calls :func:`require_service`
(headless Chromium: :func:`require_chromium`). Locally an unreachable server skips the test with
a loud reason; with ``BABELQ_REQUIRE_LIVE=1`` (set by ``.ci/run``) it fails instead, so CI proves
every live test ran.

Spark: the ``spark`` fixture is one local SparkSession for the whole test session;
``spark_cluster`` is one standalone cluster (a master, two workers) for the tests that need
separate executors (``tests/cluster.py``).

Parallel runs: the suite runs in three pytest-xdist workers (``-n 3`` in pyproject) with the
scheduler below. The modules that take the session's SparkSession (the ``spark`` fixture, or
``demo_2000`` built on it) are one unit of work, so one worker holds the one SparkSession and
runs them in order; the other Spark modules (the ``spark`` marker or the ``spark_cluster``
fixture: CLI runs, kill tests, the standalone cluster) are a second unit, so one worker holds
the one cluster; every other module is its own unit (its tests and module-scoped fixtures stay
in one worker). The Spark units are most of the suite's time and mostly wait on processes, so
the third worker overlaps them with the broker, runtime and codec modules, which mostly wait on
sockets and timeouts. ``-n 0`` runs everything in one process.

SQS: ``sqs_endpoint`` / ``sqs_url`` are one moto server for the whole test session, on a free
127.0.0.1 port over real HTTP. The SQS transport is exercised through boto3 exactly as against
AWS; only the endpoint differs. moto is slow (tens of requests per second on this machine), so
SQS tests stay few and small.
"""

from __future__ import annotations

import os
import re
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# Hypothesis's per-example deadline (200 ms) measures the machine, not the code, when two
# workers share two cores with a Spark JVM: a slow example under that load fails a run for
# nothing. The examples, their number and every assertion stay as they are.
settings.register_profile("babelq", deadline=None)
settings.load_profile("babelq")

ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE_DIR = Path(__file__).resolve().parent / "conformance"
REQUIRE_LIVE = os.environ.get("BABELQ_REQUIRE_LIVE", "") not in ("", "0", "false", "no")
#: Spark's configuration for every JVM the tests start: options that suit short jobs on cold JVMs
#: (tests/spark_conf/spark-defaults.conf says which and why; tests/spark_defaults.py)
os.environ.setdefault("SPARK_CONF_DIR", str(Path(__file__).resolve().parent / "spark_conf"))

SERVICES = {
    "redis": ("127.0.0.1", 6379),
    "rabbitmq": ("127.0.0.1", 5672),
    "postgres": ("127.0.0.1", 5432),
}

#: region of the moto SQS server (its credentials are moto's dummies, ``testing``)
SQS_REGION = "us-east-1"


def reachable(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def missing_live(message: str) -> None:
    """Skip the test with ``message`` (locally) or fail it (CI, ``BABELQ_REQUIRE_LIVE``)."""
    if REQUIRE_LIVE:
        pytest.fail(message + " (BABELQ_REQUIRE_LIVE is set, so this is a failure)")
    pytest.skip(message)


def require_service(name: str) -> tuple[str, int]:
    """Skip (locally) or fail (CI) when the named service is not reachable."""
    host, port = SERVICES[name]
    if not reachable(host, port):
        missing_live(f"LIVE SERVICE DOWN: {name} at {host}:{port} is not reachable")
    return host, port


def require_chromium() -> str:
    """The headless Chromium the report export uses; skip (locally) or fail (CI) without one
    (``.ci/run`` installs Debian's ``chromium`` when it is missing)."""
    from babelq.pipelines.report.export import find_chromium, missing_note

    found = find_chromium()
    if found is None:
        missing_live(f"CHROMIUM MISSING: the report's PNG/PDF export cannot be tested; {missing_note()}")
    assert found is not None
    return found


#: a module takes the session's SparkSession when a function in it takes ``spark`` or a fixture built on it
_SESSION_SOURCE = re.compile(r"def \w+\([^)]*\b(spark|demo_2000)\b")
#: any other Spark module marks tests ``spark`` or takes the standalone cluster
_SPARK_SOURCE = re.compile(r"pytest\.mark\.spark\b|def \w+\([^)]*\bspark_cluster\b")
#: a module that takes the standalone cluster (one per worker: its modules share one)
_CLUSTER_SOURCE = re.compile(r"def \w+\([^)]*\bspark_cluster\b")
_spark_units: dict[str, str | None] = {}


#: session modules that spend most of their time waiting on Spark processes of their own (killed
#: and restarted CLI runs): workers with a session of their own take them, two units of about the
#: same length, so the first session's worker is not the suite's longest
_OTHER_SESSIONS = {
    "tests/outbox/test_outbox_ingest.py": "spark-2",
    "tests/pipelines/test_settle_crash.py": "spark-2",
    "tests/pipelines/test_ingest_rerun.py": "spark-3",
    "tests/pipelines/test_consume_crash.py": "spark-3",
}


def spark_unit(root: Path, module: str) -> str | None:
    """``"spark"`` (or ``"spark-2"``, ``"spark-3"``) for a module that uses a worker's SparkSession,
    ``"spark-cluster"`` for one that takes the standalone cluster, ``"spark-processes"`` for one
    that runs Spark only in processes of its own (CLI runs, kills), None otherwise."""
    if module not in _spark_units:
        try:
            source = (root / module).read_text(encoding="utf-8")
        except OSError:
            source = ""
        unit = "spark" if _SESSION_SOURCE.search(source) else None
        if unit is not None:
            unit = _OTHER_SESSIONS.get(module, unit)
        if unit is None and _SPARK_SOURCE.search(source):
            unit = "spark-cluster" if _CLUSTER_SOURCE.search(source) else "spark-processes"
        _spark_units[module] = unit
    return _spark_units[module]


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's file scheduling, except that the Spark modules form units: those sharing a
    worker's SparkSession (one worker, one session; three such units), those taking the standalone
    cluster (one worker, one cluster) and those that start Spark processes of their own."""
    from xdist.scheduler import LoadFileScheduling

    class SparkModulesTogether(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return spark_unit(config.rootpath, module) or module

    return SparkModulesTogether(config, log)


@pytest.fixture
def unique_queue(request: pytest.FixtureRequest) -> str:
    """A queue name no other test (or helper process) uses."""
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40].strip("-").lower()
    return f"t-{stem}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession (local[2]) shared by every Spark test."""
    pytest.importorskip("pyspark")
    from babelq.spark.session import get_session

    session = get_session(app_name="babelq-tests", master="local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def demo_2000_progress() -> list[str]:
    """The plain progress lines of the ``demo_2000`` run, a line for every change (filled when
    ``demo_2000`` runs; ask for both)."""
    return []


@pytest.fixture(scope="session")
def demo_2000(spark: Any, tmp_path_factory: pytest.TempPathFactory, demo_2000_progress: list[str]) -> Any:
    """One 2,000-row ``babelq demo`` on the shared session (its report exported to PNG when
    Chromium is there), for the tests that read its result and files (``tests/pipelines/test_demo.py``,
    ``test_report.py``): the demo costs about a minute here, so it runs once. Its progress is
    shown as plain lines into ``demo_2000_progress``."""
    import logging

    from babelq.pipelines.demo import run_demo
    from babelq.pipelines.progress import Progress

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            demo_2000_progress.append(record.getMessage())

    logger = logging.getLogger("babelq.tests.demo_2000.progress")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(Collect())
    return run_demo(rows=2_000, out=tmp_path_factory.mktemp("demo") / "demo", spark=spark, timeout=300,
                    progress=Progress.lines(every=0, logger=logger))


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Spark standalone cluster for the whole session: a master and two workers (1 core, 1 GB
    each) on 127.0.0.1, from PySpark's own ``spark-class`` (:class:`cluster.StandaloneCluster`).

    Its ``master_url`` is what ``--master`` takes; ``executor_pids()`` lists the executor JVMs the
    workers launched. One pytest process holds one SparkContext (the local ``spark`` fixture), so
    jobs reach this cluster through the CLI in subprocesses.
    """
    pytest.importorskip("pyspark")
    from cluster import StandaloneCluster

    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_listening(port: int, within: float = 20.0) -> None:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if reachable("127.0.0.1", port, timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"moto server did not start on port {port}")


@pytest.fixture(scope="session")
def sqs_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a moto SQS server for this test session."""
    server_module = pytest.importorskip("moto.server")
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", SQS_REGION)
    port = _free_port()
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    _wait_listening(port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="session")
def sqs_url(sqs_endpoint: str) -> str:
    """The ``sqs://`` transport URL for the moto server (credentials are moto's dummies)."""
    return (
        f"sqs://?endpoint_url={sqs_endpoint}&region={SQS_REGION}"
        "&aws_access_key_id=testing&aws_secret_access_key=testing"
    )


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.live),
                        pytest.param("redis-laravel", marks=pytest.mark.live)])  # fmt: skip
def sweep_broker_url(request: pytest.FixtureRequest, tmp_path: Path, unique_queue: str) -> Iterator[str]:
    """A broker an expiry sweep can scan: SQLite, Redis in both layouts (queue and DLQ purged after)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/q.db"
        return
    require_service("redis")
    url = "redis://127.0.0.1:6379/15" + ("?laravel=1" if request.param == "redis-laravel" else "")
    yield url
    from babelq.transports import open_transport

    transport = open_transport(url)
    for queue in (unique_queue, f"{unique_queue}.dlq"):
        transport.purge(queue)
    transport.close()

"""A Spark standalone cluster on this machine, for tests: one master and two workers.

Why a real cluster: ``local[N]`` runs every task inside the driver's JVM, in the driver's
working directory, with the driver's Python. What breaks only on a cluster does not show
there: executors whose Python lacks babelq, a relative SQLite path that each executor resolves
in its own work directory, a CLI that forces ``local[2]`` over the master it was given. The
daemons are PySpark's own (``<pyspark>/bin/spark-class ...Master`` / ``...Worker``), so the test
needs nothing beyond the pip-installed pyspark and Java.

Everything lives under one directory (``conf/`` empty so no stray ``spark-defaults.conf`` is
read, ``work/worker-N`` for executors' files and logs, ``logs/`` for the daemons' output), on
127.0.0.1 and free ports. Each daemon is started in its own session, so :meth:`stop` ends a
worker, the executors it launched and their Python workers as one process group.

Linux only: :meth:`executor_pids` reads ``/proc`` to find the executor JVMs a worker launched
(their working directory is the worker's work directory), which is what a test that SIGKILLs
an executor mid-job needs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spark_defaults import isolated_env

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"

#: variables of the test process that must not leak into the daemons (and from them into
#: executors and their Python workers): a PYTHONPATH would make babelq importable there
_SCRUBBED = ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYSPARK_SUBMIT_ARGS", "MASTER",
             "SPARK_CONF_DIR", "BABELQ_SPARK_MASTER", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")


def spark_home() -> Path:
    """The pip-installed pyspark's directory: it holds ``bin/spark-class`` and ``jars/``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True, slots=True)
class ExecutorProcess:
    """One executor JVM a worker of this cluster launched."""

    pid: int
    app_id: str
    executor_id: str
    worker: int  #: index of the worker that launched it (0 or 1)


class StandaloneCluster:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each, under ``root``."""

    def __init__(self, root: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.root = root
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.conf_dir = root / "conf"
        self.log_dir = root / "logs"
        self.work_dirs = [root / "work" / f"worker-{i}" for i in range(workers)]
        self.master_port = free_port()
        self.webui_port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.master_port}"
        self.webui_url = f"http://127.0.0.1:{self.webui_port}"
        self._master: subprocess.Popen[bytes] | None = None
        self._workers: list[subprocess.Popen[bytes]] = []
        self.start_seconds = 0.0

    # -- life cycle ---------------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """The daemons' environment: this process's, without anything that points at babelq or
        at another Spark configuration."""
        env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_CONF_DIR=str(self.conf_dir),
            SPARK_LOG_DIR=str(self.log_dir),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_NO_DAEMONIZE="1",
            # the master and workers mostly wait: the same cheap JIT as the tests' JVMs
            SPARK_DAEMON_JAVA_OPTS="-XX:TieredStopAtLevel=1",
        )
        return env

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = (self.log_dir / f"{name}.log").open("ab")
        try:
            return subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env(),
                cwd=self.root,
                start_new_session=True,  # its own process group: stop() ends it with its children
            )
        finally:
            log.close()

    def start(self, timeout: float = 120.0) -> None:
        """Start the master, then the workers; return once every worker is registered ALIVE."""
        started = time.monotonic()
        for path in (self.conf_dir, self.log_dir, *self.work_dirs):
            path.mkdir(parents=True, exist_ok=True)
        self._master = self._spawn(
            "master", MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.master_port),
            "--webui-port", str(self.webui_port),
        )
        for i, work in enumerate(self.work_dirs):
            self._workers.append(
                self._spawn(
                    f"worker-{i}", WORKER_CLASS, "--host", "127.0.0.1", "--port", str(free_port()),
                    "--webui-port", str(free_port()), "--cores", str(self.cores), "--memory", self.memory,
                    "--work-dir", str(work), self.master_url,
                )
            )
        try:
            self._wait_for_workers(started + timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started

    def _wait_for_workers(self, deadline: float) -> None:
        while True:
            daemons = [("master", self._master), *((f"worker-{i}", w) for i, w in enumerate(self._workers))]
            for name, proc in daemons:
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"spark {name} exited with {proc.returncode}:\n{self.log_tail(name)}")
            with contextlib.suppress(OSError, ValueError):
                if len(self.alive_workers()) >= self.workers:
                    return
            if time.monotonic() > deadline:
                names = ["master", *(f"worker-{i}" for i in range(self.workers))]
                raise RuntimeError(
                    f"{self._alive_count()} of {self.workers} workers registered with {self.master_url}:\n"
                    + "\n".join(self.log_tail(n) for n in names)
                )
            time.sleep(0.25)

    def _alive_count(self) -> int:
        try:
            return len(self.alive_workers())
        except (OSError, ValueError):
            return 0

    def stop(self) -> None:
        """Stop the workers (and with them their executors and Python workers), then the master."""
        for proc in self._workers:
            self._end(proc)
        for executor in self.executor_pids():  # one a worker did not take down with it
            with contextlib.suppress(ProcessLookupError):
                os.kill(executor.pid, signal.SIGKILL)
        if self._master is not None:
            self._end(self._master)
        self._workers = []
        self._master = None

    @staticmethod
    def _end(proc: subprocess.Popen[bytes], grace: float = 15.0) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(grace)
        # the group may outlive its leader: an executor or a Python worker the worker launched
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)

    # -- what the master says ---------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The master's web UI JSON (``/json/``): workers, active and completed applications."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=5) as response:
            state: dict[str, Any] = json.loads(response.read())
            return state

    def alive_workers(self) -> list[dict[str, Any]]:
        return [w for w in self.state().get("workers", []) if w.get("state") == "ALIVE"]

    def applications(self) -> list[dict[str, Any]]:
        """Every application the master has seen, active first (each with ``id``, ``name``, ``state``)."""
        state = self.state()
        return [*state.get("activeapps", []), *state.get("completedapps", [])]

    def application(self, app_id: str, within: float = 30.0) -> dict[str, Any]:
        """The application ``app_id`` as the master lists it; waits for a just-ended one to be listed."""
        deadline = time.monotonic() + within
        while True:
            for app in self.applications():
                if app.get("id") == app_id:
                    return app
            if time.monotonic() > deadline:
                raise LookupError(f"{self.master_url} lists no application {app_id}")
            time.sleep(0.25)

    # -- executor processes -------------------------------------------------------------------------

    def executor_pids(self, app_id: str | None = None) -> list[ExecutorProcess]:
        """The live executor JVMs this cluster's workers launched (of ``app_id`` only, if given).

        An executor runs in ``<worker work dir>/<app id>/<executor id>``; that is how one of ours
        is told from any other Spark on the machine.
        """
        found: list[ExecutorProcess] = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                args = (entry / "cmdline").read_bytes().split(b"\0")
                if EXECUTOR_CLASS.encode() not in args:
                    continue
                cwd = Path(os.readlink(entry / "cwd"))
            except OSError:  # gone, or not ours to read
                continue
            for index, work in enumerate(self.work_dirs):
                if cwd.is_relative_to(work):
                    executor = ExecutorProcess(
                        pid=int(entry.name),
                        app_id=_argument(args, b"--app-id"),
                        executor_id=_argument(args, b"--executor-id"),
                        worker=index,
                    )
                    if app_id is None or executor.app_id == app_id:
                        found.append(executor)
        return sorted(found, key=lambda e: (e.app_id, e.executor_id))

    def kill_executor(self, pid: int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to one executor JVM of this cluster (refuses any other process)."""
        if pid not in {e.pid for e in self.executor_pids()}:
            raise ValueError(f"process {pid} is not an executor of this cluster")
        os.kill(pid, sig)

    # -- logs ------------------------------------------------------------------------------------------

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.log_dir / f"{name}.log"
        if not path.exists():
            return f"[{name}: no log]"
        text = path.read_text("utf-8", "replace").splitlines()[-lines:]
        return f"[{name}]\n" + "\n".join(text)

    def executor_logs(self, app_id: str) -> dict[str, str]:
        """``<worker>/<executor id>`` -> that executor's stderr (Spark's log of the tasks it ran)."""
        logs: dict[str, str] = {}
        for index, work in enumerate(self.work_dirs):
            for stderr in sorted((work / app_id).glob("*/stderr")):
                logs[f"worker-{index}/{stderr.parent.name}"] = stderr.read_text("utf-8", "replace")
        return logs


def _argument(args: list[bytes], flag: bytes) -> str:
    try:
        return args[args.index(flag) + 1].decode()
    except (ValueError, IndexError):
        return ""


def wait_for(predicate: Any, within: float, what: str) -> None:
    """Poll ``predicate()`` until true or raise after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {within:g} s waiting for {what}")
        time.sleep(0.2)


def make_bare_python(root: Path) -> Path:
    """A Python environment with pyspark and every dependency babelq needs, but not babelq.

    A venv whose one ``.pth`` line is this interpreter's site-packages: Python adds that
    directory to ``sys.path`` but, being a plain path line, does not run the ``.pth`` files in it,
    so babelq's own editable-install ``.pth`` (the only thing that makes ``import babelq`` work
    here) is never read. This is what an executor of a cluster that never had babelq installed
    looks like; the function proves it before returning the interpreter.
    """
    import site
    import sys

    env = root / "bare-env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    python = env / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()
    ours = [p for p in site.getsitepackages() if Path(p, "pyspark").is_dir()]
    Path(purelib, "babelq-test-dependencies.pth").write_text("\n".join(ours) + "\n")
    check = subprocess.run(
        [str(python), "-c", "import pyspark, orjson, pyarrow, redis\n"
         "try:\n    import babelq\nexcept ModuleNotFoundError:\n    print('absent')\n"],
        capture_output=True, text=True, cwd=root, env=_without_pythonpath(), timeout=60, check=False,
    )
    if check.returncode != 0 or check.stdout.strip() != "absent":
        raise RuntimeError(f"{python} is not a Python without babelq: {check.stdout}{check.stderr}")
    return python


def _without_pythonpath() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@dataclass(slots=True)
class EventLog:
    """What one application's Spark event log says (``spark.eventLog.enabled``, uncompressed)."""

    app_id: str
    properties: dict[str, str]
    #: executor id of every finished task ("driver" for a task run inside the driver: local mode)
    task_executors: list[str]
    #: executor id -> host, for every executor the application was given
    executors: dict[str, str]

    @property
    def master(self) -> str:
        return self.properties.get("spark.master", "")


def read_event_log(directory: Path) -> EventLog:
    """The one application event log in ``directory`` (a finished application's)."""
    files = [p for p in directory.iterdir() if p.is_file() and not p.name.startswith(".")]
    if len(files) != 1:
        raise AssertionError(f"expected one event log in {directory}, found {[p.name for p in files]}")
    app_id, properties, tasks, executors = "", {}, [], {}
    for line in files[0].read_text("utf-8").splitlines():
        event = json.loads(line)
        kind = event.get("Event")
        if kind == "SparkListenerApplicationStart":
            app_id = event.get("App ID", "")
        elif kind == "SparkListenerEnvironmentUpdate":
            properties = dict(event.get("Spark Properties", {}))
        elif kind == "SparkListenerTaskEnd":
            tasks.append(str(event["Task Info"]["Executor ID"]))
        elif kind == "SparkListenerExecutorAdded":
            executors[str(event["Executor ID"])] = event.get("Executor Info", {}).get("Host", "")
    return EventLog(app_id, properties, tasks, executors)


def event_log_conf(directory: Path) -> list[str]:
    """``--conf`` arguments that make an application write its event log into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    return [
        "--conf", "spark.eventLog.enabled=true",
        "--conf", f"spark.eventLog.dir=file://{directory}",
        "--conf", "spark.eventLog.compress=false",
        "--conf", "spark.eventLog.rolling.enabled=false",  # Spark 4 rolls by default: one file instead
    ]


__all__ = [
    "EventLog",
    "ExecutorProcess",
    "StandaloneCluster",
    "event_log_conf",
    "free_port",
    "make_bare_python",
    "read_event_log",
    "spark_home",
    "wait_for",
]


#: kill an executor only within this many seconds of a task's launch, so the SIGKILL lands while
#: the task runs (a micro-batch's tasks run for a second or more)
FRESH_TASK = 0.3


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=2) as response:
        return json.loads(response.read())


def running_tasks(ui: str, app_id: str) -> list[tuple[float, str]]:
    """(seconds since launch, executor id) of every task running now, from the settle driver's REST
    API (empty while it is not up). Task entities are written at each task's start and end, unlike
    an executor's ``activeTasks``, which the status store may show a few hundred ms late."""
    api = f"{ui}/api/v1/applications/{app_id}"
    out: list[tuple[float, str]] = []
    try:
        for stage in _get_json(f"{api}/stages?status=active"):
            tasks = _get_json(f"{api}/stages/{stage['stageId']}/{stage['attemptId']}/taskList?status=RUNNING")
            for task in tasks:
                if task.get("status") == "RUNNING":
                    launched = datetime.strptime(task["launchTime"], "%Y-%m-%dT%H:%M:%S.%f%Z")
                    age = time.time() - launched.replace(tzinfo=UTC).timestamp()
                    out.append((age, str(task["executorId"])))
    except (OSError, ValueError, KeyError):
        return []
    return sorted(out)


def _running_app(cluster: StandaloneCluster, name: str) -> str:
    """The id of the newest running application called ``name`` on the cluster, "" before it registers."""
    running = [a for a in cluster.state().get("activeapps", []) if a.get("name") == name]
    return str(max(running, key=lambda a: a.get("starttime", 0))["id"]) if running else ""


@dataclass
class Watch:
    """What the test saw while the application ran."""

    app_id: str = ""
    #: every executor JVM of the application seen: pid -> executor id
    executors: dict[int, str] = field(default_factory=dict)
    killed: int = 0
    killed_executor: str = ""
    killed_at_entries: int = 0
    #: executor JVMs first seen after the kill
    after_kill: dict[int, str] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)


def watch_and_kill(cluster: StandaloneCluster, process: subprocess.Popen[str], *, ui: str, app_name: str,
                   progress: Callable[[], int], expected: int, within: float) -> Watch:
    """Poll until ``process`` exits; SIGKILL an executor of ``app_name`` that started a task a moment
    ago (``FRESH_TASK``), once ``progress()`` (rows the job has committed) is above 0 and below
    ``expected``. ``ui`` is the driver's web UI, whose REST API says which tasks run where."""
    watch = Watch()
    started = time.monotonic()
    while process.poll() is None and time.monotonic() - started < within:
        time.sleep(0.1)
        if not watch.app_id:
            watch.app_id = _running_app(cluster, app_name)
            continue
        for e in cluster.executor_pids(watch.app_id):
            if e.pid not in watch.executors:
                watch.executors[e.pid] = e.executor_id
                if watch.killed:
                    watch.after_kill[e.pid] = e.executor_id
                    watch.log.append(f"{time.monotonic() - started:.1f} s: new executor "
                                     f"{e.executor_id} (pid {e.pid})")
        if watch.killed:
            continue
        done = progress()
        if not 0 < done < expected:
            continue
        # a task that started a moment ago: the kill lands inside it, not as it ends
        live = {e.executor_id: e.pid for e in cluster.executor_pids(watch.app_id)}
        fresh = [(age, x) for age, x in running_tasks(ui, watch.app_id) if age < FRESH_TASK and x in live]
        if fresh:
            age, victim = fresh[0]
            watch.killed_executor, watch.killed, watch.killed_at_entries = victim, live[victim], done
            cluster.kill_executor(watch.killed)
            watch.log.append(f"{time.monotonic() - started:.1f} s: SIGKILL executor {victim} (pid "
                             f"{watch.killed}, its task started {age:.2f} s ago) at {done:,} of {expected:,}")
    return watch


def failed_tasks(events: Path) -> list[dict[str, Any]]:
    """The ``Task End Reason`` of every task of the application's event log that did not succeed."""
    [log] = [p for p in events.iterdir() if p.is_file() and not p.name.startswith(".")]
    failed = []
    for line in log.read_text("utf-8").splitlines():
        event = json.loads(line)
        if event.get("Event") == "SparkListenerTaskEnd":
            reason = event.get("Task End Reason", {})
            if reason.get("Reason") != "Success":
                failed.append({**reason, "Message": str(reason.get("Message", ""))[:200]})
    return failed


#: short jobs on cold JVMs: C2 would spend more CPU compiling Spark than it saves (2 shared cores);
#: -DontCompileHugeMethods as get_session's default (decode's generated code is over 8000 bytes)
QUICK_JIT = ["--conf", "spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:-DontCompileHugeMethods",
             "--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:-DontCompileHugeMethods"]
#: variables of the test process a babelq command run against the cluster must not see
_CLI_SCRUBBED = ("BABELQ_BROKER", "BABELQ_SPARK_MASTER", "MASTER", "SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS",
                 "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a babelq command run against the cluster."""
    env = isolated_env(_CLI_SCRUBBED)
    # the driver must be reachable by the executors at the address it advertises
    env.update({"SPARK_LOCAL_IP": "127.0.0.1", **(extra or {})})
    return env


@contextlib.contextmanager
def queue_and_schema(redis: str, queue: str, postgres: str, prefix: str) -> Iterator[tuple[Any, str, str]]:
    """A transport on ``redis`` whose ``queue`` and its DLQ are purged afterwards, and a PostgreSQL
    schema of its own, dropped afterwards: (transport, the URL with the schema as ``search_path``,
    the schema)."""
    import psycopg

    from babelq.envelope import dlq_name
    from babelq.transports import open_transport

    schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
    transport = open_transport(redis)
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield transport, f"{postgres}?options=-csearch_path%3D{schema}", schema
    finally:
        transport.purge(queue)
        transport.purge(dlq_name(queue))
        transport.close()
        with psycopg.connect(postgres, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")

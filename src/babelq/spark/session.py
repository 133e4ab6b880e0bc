"""One place that builds the SparkSession babelq's jobs, CLI and tests use, on any master.

**Which master** (the first that applies):

1. the ``master`` argument (the CLI's ``--master``), else ``spark.master`` among the settings
   (the CLI's ``--conf spark.master=...``);
2. ``$BABELQ_SPARK_MASTER``;
3. a master Spark was already given: spark-submit's ``--master`` (also through
   ``PYSPARK_SUBMIT_ARGS``), ``spark.master`` in ``spark-defaults.conf`` (``$SPARK_CONF_DIR``),
   Spark's own ``$MASTER``;
4. ``local[2]``, the embedded default.

Why the fallback is handed to Spark as ``$MASTER`` instead of as a setting: spark-submit, which
also launches the JVM of a plain ``python`` process, takes ``--master``, then ``spark.master``
from ``--conf`` and ``spark-defaults.conf``, then ``$MASTER``, then ``local[*]``. A master passed
as a setting beats all of those, so a fallback given that way would override a cluster.
Giving ``local[2]`` as ``$MASTER`` (only while this process launches its JVM, only when the
variable is unset) puts it exactly under everything a person can configure, without babelq
reading Spark's files itself. Under spark-submit the JVM is already running with its master;
babelq then sets none unless told to (1 or 2).

**Executors without babelq.** On a non-local master the executors' Python may not have babelq
installed. :func:`get_session` zips the package the driver runs (its Python code and its jar,
:func:`package_zip`, cached by content) and ships it through Spark's own mechanisms, three ways
because PySpark runs Python in three kinds of places:

* ``SparkContext.addPyFile`` (what ``--py-files`` does): every executor fetches the file, and the
  functions PySpark pickles (UDFs, the data source's writer) carry it as an include. It must
  happen before anything captures the context's includes (a data source registered earlier
  would not see it), hence here, inside session creation;
* ``spark.executorEnv.PYTHONPATH`` naming the file, relative to the executor's working directory
  where Spark fetches it: the JVM builds the data source's read and commit functions itself,
  without includes. Executor settings only count before the SparkContext exists, so the JVM is
  launched first (:func:`_resolve_master`) to learn the master, then the context is created;
* the file on the ``$PYTHONPATH`` of a JVM this process launches for a named cluster master or a
  different ``PYSPARK_PYTHON``: the Python workers Spark starts on the driver (the data source's
  planning, the streaming reader) take the JVM's own environment.

``--conf spark.babelq.shipPackage=false`` turns it off (babelq installed on every host, or in a
packed environment shipped with ``spark.archives``). babelq's dependencies (orjson, pyarrow,
redis...) are not shipped: they are the executors' environment's.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: the Spark setting that makes the VARIANT parser keep the last of repeated keys (as the core does)
DUPLICATE_KEYS_CONF = "spark.sql.variant.allowDuplicateKeys"
#: environment variable naming the master babelq's commands use (below --master, above Spark's own)
MASTER_ENV = "BABELQ_SPARK_MASTER"
#: the master when nobody named one
LOCAL_FALLBACK = "local[2]"
#: the address a JVM running a local master binds to (unless $SPARK_LOCAL_IP says otherwise)
LOCAL_IP = "127.0.0.1"
#: set to false to stop get_session shipping the babelq package to a cluster's executors
SHIP_PACKAGE_CONF = "spark.babelq.shipPackage"
#: the interpreter executors run; PySpark reads it from $PYSPARK_PYTHON only, so a setting is copied there
PYTHON_CONF = "spark.pyspark.python"
#: the executors' PYTHONPATH, where the shipped zip goes (see get_session)
EXECUTOR_PYTHONPATH = "spark.executorEnv.PYTHONPATH"
#: the driver JVM's options (babelq's defaults, the caller's, the class archive's)
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
#: HotSpot never JIT-compiles a method over 8000 bytes of bytecode; Spark's generated code for a
#: wide projection (babelq.spark.decode's) is bigger and runs much slower interpreted. On a
#: cluster, the executors get the same flag (spark.executor.extraJavaOptions).
COMPILE_HUGE_METHODS = "-XX:-DontCompileHugeMethods"
#: G1 grows the heap while more than 1/(1+GCTimeRatio) of the time goes to collecting; its default
#: ratio, 12, lets a local driver (which hosts the executors too) grow towards spark.driver.memory
#: in any long run, at no gain in time (docs/pipelines.md, Performance). Only the driver's: an
#: executor's heap is its own setting.
HEAP_GROWTH = "-XX:GCTimeRatio=4"
#: babelq's default driver JVM options (a caller's spark.driver.extraJavaOptions replaces them)
DRIVER_JVM_FLAGS = f"{COMPILE_HUGE_METHODS} {HEAP_GROWTH}"
#: the module Spark's Python workers start from; babelq's imports the installed pyspark (worker_daemon)
DAEMON_MODULE_CONF = "spark.python.daemon.module"

_FALSE = frozenset({"false", "0", "no", "off"})
#: PySpark's call-site capture for DataFrame errors (off by default here: see _settings)
DEBUGGING_CONF = "spark.python.sql.dataFrameDebugging.enabled"


#: how long a new Python worker has to answer the JVM's handshake (see _settings)
PYTHON_HANDSHAKE_CONF = "spark.python.authenticate.socketTimeout"
PYTHON_HANDSHAKE_TIMEOUT = "120s"


def is_local_master(master: str) -> bool:
    """Whether ``master`` runs every task inside the driver's JVM (``local``, ``local[N]``, ``local[N,F]``).

    Then executors share the driver's working directory, files and Python. ``local-cluster[...]``
    is not local in this sense: its executors are separate JVMs in their own directories.
    """
    return master == "local" or master.startswith("local[")


def explicit_master(master: str | None = None, conf: Mapping[str, str] | None = None) -> str | None:
    """The master the caller chose: ``master``, else ``conf["spark.master"]``, else ``$BABELQ_SPARK_MASTER``.

    None leaves the choice to Spark's own configuration, then to :data:`LOCAL_FALLBACK`.
    """
    for candidate in (master, (conf or {}).get("spark.master"), os.environ.get(MASTER_ENV)):
        if candidate and candidate.strip():
            return candidate.strip()
    return None


def _jvm_running() -> bool:
    """Whether this process already has a Py4J gateway (spark-submit started it, or an earlier session)."""
    from pyspark import SparkContext

    return SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ


def _other_python() -> bool:
    """Whether Spark's Python workers will run an interpreter other than this one (which has babelq)."""
    chosen = os.environ.get("PYSPARK_PYTHON", sys.executable)
    return os.path.abspath(shutil.which(chosen) or chosen) != os.path.abspath(sys.executable)


def _shipping(settings: Mapping[str, str], given: Any = None) -> bool:
    """Whether babelq ships its package: ``spark.babelq.shipPackage`` from the caller's settings,
    else from what Spark was given (``spark-defaults.conf``...); on unless false."""
    value = settings.get(SHIP_PACKAGE_CONF)
    if value is None and given is not None:
        value = given.get(SHIP_PACKAGE_CONF, None)
    return (value or "true").strip().lower() not in _FALSE


@contextmanager
def _launch_env(chosen: str | None, settings: Mapping[str, str]) -> Iterator[None]:
    """The environment of a JVM this process launches inside the block (restored afterwards).

    * ``$MASTER`` = :data:`LOCAL_FALLBACK` when no master was named and ``$MASTER`` is unset:
      Spark's lowest-ranked master, so whatever else Spark was given wins.
    * the babelq zip first on ``$PYTHONPATH`` when the master is a named cluster or the Python
      workers run another interpreter: Spark starts some Python workers on the driver with the
      JVM's own environment (the data source's planning, the streaming reader), and they must
      import babelq even where ``PYSPARK_PYTHON`` has none.
    * ``$SPARK_LOCAL_IP`` = ``127.0.0.1`` when the chosen master is local (``local``, ``local[N]``)
      and the variable is unset: the driver and its executor are one JVM, and Spark would
      otherwise warn about a hostname that resolves to a loopback address and pick an interface.
    * ``$SPARK_HOME`` = the installed pyspark without its zipped copy
      (:mod:`babelq.spark.spark_home`) when nobody set ``$SPARK_HOME`` and Spark's Python
      processes run this interpreter: they then import precompiled pyspark modules instead of
      compiling the zip's in every new process. Setting ``$SPARK_HOME`` keeps Spark's own layout.
    """
    saved = {name: os.environ.get(name) for name in ("MASTER", "PYTHONPATH", "SPARK_HOME", "SPARK_LOCAL_IP")}
    if chosen is None and "MASTER" not in os.environ:
        os.environ["MASTER"] = LOCAL_FALLBACK
    if chosen is not None and is_local_master(chosen) and "SPARK_LOCAL_IP" not in os.environ:
        # everything runs in this JVM: bind to loopback instead of letting Spark look for an
        # address and warn that the hostname resolves to one
        os.environ["SPARK_LOCAL_IP"] = LOCAL_IP
    if "SPARK_HOME" not in os.environ and not _other_python():
        from babelq.spark.spark_home import installed_pyspark_home, spark_home_without_zip

        home = installed_pyspark_home()
        if home is not None:  # this Python's pyspark, precompiled, in every Python process Spark starts here
            os.environ["SPARK_HOME"] = str(spark_home_without_zip(home, _cache_dir()))
    if _shipping(settings) and ((chosen is not None and not is_local_master(chosen)) or _other_python()):
        current = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join([str(package_zip()), *([current] if current else [])])
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _with_log_level(settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` with the driver JVM option that applies ``spark.babelq.logLevel`` from the JVM's
    first line (:mod:`babelq.spark.log_level`: babelq's quiet log4j2 file), when one applies."""
    from babelq.spark.log_level import launch_java_options

    out = dict(settings)
    present = out.get(DRIVER_JAVA_OPTIONS, "")
    options = launch_java_options(settings, present)
    if options:
        out[DRIVER_JAVA_OPTIONS] = f"{present} {options}".strip()
    return out


def _with_class_archive(settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` with the driver JVM's class-data sharing options added
    (:mod:`babelq.spark.class_archive`), unless ``spark.babelq.classArchive`` is false."""
    from babelq.spark.class_archive import ARCHIVE_CONF, java_options
    from babelq.spark.spark_home import installed_pyspark_home

    out = dict(settings)
    if (settings.get(ARCHIVE_CONF) or "true").strip().lower() in _FALSE:
        return out
    given_home = os.environ.get("SPARK_HOME")
    home = Path(given_home) if given_home else installed_pyspark_home()
    options = java_options(_cache_dir(), home) if home is not None else ""
    if options:
        present = out.get(DRIVER_JAVA_OPTIONS, "")
        out[DRIVER_JAVA_OPTIONS] = f"{present} {options}".strip()
    return out


def _resolve_master(chosen: str | None, settings: Mapping[str, str]) -> tuple[str, Any]:
    """Launch the JVM if this process has none, and return the master the session will run on
    (and the JVM's view of Spark's settings) before any SparkContext exists, while executor
    settings can still be added."""
    from pyspark import SparkConf, SparkContext

    active = SparkContext._active_spark_context
    if active is not None:
        if chosen is not None and chosen != active.master:
            log.warning("a SparkContext on %s is already running in this process; %s is not used",
                        active.master, chosen)
        return str(active.master), active.getConf()
    if _jvm_running():  # ours from an earlier session, or spark-submit's: connect, launch nothing
        SparkContext._ensure_initialized()
    else:
        from babelq.spark.jvm_output import launch_gateway
        from babelq.spark.log_level import quiet

        with _launch_env(chosen, settings):
            launch = SparkConf(loadDefaults=False)
            for key, value in _with_class_archive(_with_log_level(settings)).items():
                launch.set(key, value)
            # quiet: the JVM's own start-up line filtered from its stderr (babelq.spark.jvm_output)
            gateway = launch_gateway(launch) if quiet(settings) else None
            SparkContext._ensure_initialized(conf=launch, gateway=gateway)
    given = SparkConf()  # the JVM's system properties: what spark-submit resolved, defaults included
    return chosen or str(given.get("spark.master", LOCAL_FALLBACK)), given


def _settings(master: str | None, conf: Mapping[str, str]) -> tuple[str | None, dict[str, str]]:
    """The master the caller chose (None: Spark's or the fallback) and the session's settings:
    babelq's defaults under ``conf``, the JVM helpers' jar added. Points Spark's Python at this
    interpreter unless the caller chose another."""
    if conf.get(PYTHON_CONF):
        os.environ["PYSPARK_PYTHON"] = conf[PYTHON_CONF]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    chosen = explicit_master(master, conf)
    settings = {
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "2g",
        "spark.ui.showConsoleProgress": "false",
        DRIVER_JAVA_OPTIONS: DRIVER_JVM_FLAGS,  # see COMPILE_HUGE_METHODS and HEAP_GROWTH
        "spark.executor.extraJavaOptions": COMPILE_HUGE_METHODS,
        # JSON with a repeated object key keeps the last value in Python's json, orjson and
        # every other SDK; Spark's VARIANT parser refuses such text unless this is on, and
        # babelq.spark.decode would then call an otherwise valid body poison.
        DUPLICATE_KEYS_CONF: "true",
        # PySpark records the Python call site of every Column function for error messages: five
        # extra Py4J round trips per call (the session, the origin object, a setting, set, clear).
        # babelq builds its codecs and checks from thousands of such calls, so this would multiply
        # the time to build decode's expressions. An error still names the failing expression;
        # set it to true to get the Python line as well.
        DEBUGGING_CONF: "false",
        # A new Python worker must answer the JVM's handshake within this; Spark's 15 s fails a
        # worker whose imports are slow on a loaded machine ("Python worker failed to connect back").
        PYTHON_HANDSHAKE_CONF: PYTHON_HANDSHAKE_TIMEOUT,
    }
    settings.update({k: v for k, v in conf.items() if k != "spark.master"})
    if chosen:
        settings["spark.master"] = chosen
    # babelq's JVM helpers (babelq.spark.jvm): the envelope scanner, Python's float repr, the JSON writers
    from babelq.spark.jvm import jar_path

    jars = [j for j in settings.get("spark.jars", "").split(",") if j]
    settings["spark.jars"] = ",".join([*jars, jar_path()] if jar_path() not in jars else jars)
    return chosen, settings


def launch_jvm(master: str | None = None, **conf: str) -> None:
    """Start the driver JVM :func:`get_session` would start, with the same settings, and return
    before any SparkContext exists: a caller overlaps the JVM's start (seconds, mostly spent in the
    child process) with other work by running this in a thread, then calls :func:`get_session`
    with the same arguments on its own thread (a SparkContext installs its Ctrl-C handler only on
    the main thread). Does nothing when this process already has a JVM."""
    chosen, settings = _settings(master, conf)
    _resolve_master(chosen, settings)


def _sigint_handler() -> Any:
    """The SIGINT handler the caller installed, or None (Python's own, or not the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    handler = signal.getsignal(signal.SIGINT)
    return None if handler in (signal.default_int_handler, None) else handler


def get_session(app_name: str = "babelq", master: str | None = None, **conf: str) -> Any:
    """Return the active SparkSession or build one on the master the precedence above picks.

    ``conf`` are Spark settings; they win over babelq's defaults below. Spark's Python workers
    run ``PYSPARK_PYTHON`` (default: ``python3`` on PATH, which may not have babelq installed),
    so we point it at this interpreter unless the caller set it or gave ``spark.pyspark.python``.
    """
    from pyspark.sql import SparkSession

    from babelq.spark.log_level import context_level

    chosen, settings = _settings(master, conf)
    resolved, given = _resolve_master(chosen, settings)
    bundle = None
    if not is_local_master(resolved) and _shipping(settings, given):
        bundle = package_zip()
        # Every executor's Python workers get it on their path, relative to the executor's working
        # directory, where Spark fetches added files. addPyFile's includes (below) reach only the
        # functions PySpark pickles; the JVM builds the data source's read and commit functions
        # without them.
        present = settings.get(EXECUTOR_PYTHONPATH) or given.get(EXECUTOR_PYTHONPATH, None)
        settings[EXECUTOR_PYTHONPATH] = os.pathsep.join([bundle.name, *([present] if present else [])])
    if DAEMON_MODULE_CONF not in settings and given.get(DAEMON_MODULE_CONF, None) is None and (
        bundle is not None or (is_local_master(resolved) and (_shipping(settings) or not _other_python()))
    ):  # the workers can import babelq: let them import pyspark's precompiled files (worker_daemon)
        settings[DAEMON_MODULE_CONF] = "babelq.spark.worker_daemon"
    builder = SparkSession.builder.appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    caller_sigint = _sigint_handler()
    session = builder.getOrCreate()
    if caller_sigint is not None:
        # A new SparkContext puts its own Ctrl-C handler in place (it cancels the jobs through the JVM,
        # which a caller ending the JVM itself does not want); the caller's own handler stays.
        signal.signal(signal.SIGINT, caller_sigint)
    sc = session.sparkContext
    sc.setLogLevel(context_level(settings))  # spark.babelq.logLevel, else ERROR (babelq.spark.log_level)
    if bundle is not None:
        if bundle.name not in (sc._python_includes or []):
            sc.addPyFile(str(bundle))  # Spark's --py-files, at run time: every executor fetches it
        log.info("shipping %s to the executors", bundle)
    elif not is_local_master(str(sc.master)):
        log.info("%s is false: the executors must have babelq installed", SHIP_PACKAGE_CONF)
    log.info("Spark master %s (application %s)", sc.master, sc.applicationId)
    return session


def ship_package(sc: Any) -> Path | None:
    """Add the babelq package (:func:`package_zip`) to a running context's Python files, unless
    ``spark.babelq.shipPackage`` is false. For a session :func:`get_session` did not build (it
    does this itself, and more: see the module's docstring). Returns the file, None when off."""
    if not _shipping({}, sc.getConf()):
        return None
    bundle = package_zip()
    if bundle.name not in (sc._python_includes or []):
        sc.addPyFile(str(bundle))
    return bundle


def _package_files(package_dir: Path) -> list[tuple[str, Path]]:
    """``(name in the zip, file)`` for every file of the package but compiled bytecode, sorted."""
    files = []
    for path in package_dir.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo"):
            files.append((f"{package_dir.name}/{path.relative_to(package_dir).as_posix()}", path))
    return sorted(files)


def _cache_dir() -> Path:
    """``$XDG_CACHE_HOME/babelq`` (``~/.cache/babelq``), owner-only; a private temporary directory
    when that cannot be made (no home, read-only home). Never a shared, guessable directory: a
    file planted there would run on every executor."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = Path(base) / "babelq"
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not os.access(path, os.W_OK):
            raise PermissionError(path)
    except OSError:
        return Path(tempfile.mkdtemp(prefix="babelq-pyfiles-"))
    return path


#: a cached zip nobody used for this long is deleted when a new one is built (a running application
#: whose executors may still fetch one has used it more recently: every session touches its zip)
PRUNE_AFTER_SECONDS = 14 * 86_400


def _prune(directory: Path, keep: Path) -> None:
    """Delete zips of earlier package contents unused for :data:`PRUNE_AFTER_SECONDS` (an editable
    install makes a new one per edit)."""
    import time

    cutoff = time.time() - PRUNE_AFTER_SECONDS
    for old in directory.glob(f"{keep.name.split('-')[0]}-*.zip"):
        try:
            if old != keep and old.stat().st_mtime < cutoff:
                old.unlink()
        except OSError:  # another session pruned or touched it first
            continue


def package_zip(package_dir: Path | None = None, cache_dir: Path | None = None) -> Path:
    """A zip of the babelq package (or of ``package_dir``) that Python can import from.

    Named by the package's version and the SHA-256 of its files, so an unchanged package reuses
    the cached file and an edited one (an editable install) gets a new name: Spark refuses to
    add a second, different file under a name it already shipped. Written to a temporary name
    and renamed, so concurrent sessions never see half a zip.
    """
    if package_dir is None:
        import babelq

        package_dir = Path(babelq.__file__).resolve().parent
    files = _package_files(package_dir)
    if not files:
        raise FileNotFoundError(f"no package files under {package_dir} to ship to the executors")
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode() + b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    from babelq import __version__

    directory = cache_dir if cache_dir is not None else _cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{package_dir.name}-{__version__}-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        os.utime(target)  # in use: _prune keeps it
        return target
    _prune(directory, keep=target)
    fd, scratch = tempfile.mkstemp(prefix=f".{target.name}.", dir=directory)
    os.close(fd)
    try:
        with zipfile.ZipFile(scratch, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for name, path in files:
                info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, path.read_bytes())
        os.replace(scratch, target)
    finally:
        if os.path.exists(scratch):
            os.unlink(scratch)
    return target

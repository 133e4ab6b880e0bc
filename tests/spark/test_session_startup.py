"""What makes a babelq Spark session start fast: Python processes that import the installed
pyspark (not ``pyspark.zip``) and a class-data sharing archive for the driver's JVM.

``babelq.spark.spark_home`` gives the driver's JVM a Spark home without the zipped pyspark,
``babelq.spark.worker_daemon`` drops the zip from an executor's UDF workers, and
``babelq.spark.class_archive`` records and maps the JVM's class archive. The layout and file
rules are checked on files made here; the session fixture's own Python workers and a real
``java`` prove that Spark and the JVM take what those modules give them.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from babelq.spark import class_archive, spark_home, worker_daemon


def _fake_site(root: Path) -> tuple[Path, Path]:
    """A site-packages with a pip-style pyspark package (its own python/lib/pyspark.zip)."""
    site = root / "site-packages"
    package = site / "pyspark"
    (package / "python" / "lib").mkdir(parents=True)
    (package / "jars").mkdir()
    (package / "bin").mkdir()
    for name in ("__init__.py", "daemon.py"):
        (package / name).write_text("")
    zipped = package / "python" / "lib" / "pyspark.zip"
    zipped.write_bytes(b"")
    return site, zipped


def test_worker_daemon_drops_only_the_installed_packages_own_zip(tmp_path: Path) -> None:
    site, zipped = _fake_site(tmp_path)
    py4j = zipped.parent / "py4j-0.10.9.9-src.zip"
    path = [str(zipped), str(py4j), "/opt/babelq.zip", str(site)]
    assert worker_daemon.installed_pyspark_first(path) == [str(py4j), "/opt/babelq.zip", str(site)]
    # the installed copy is not on the path: the zip is the only pyspark there is
    assert worker_daemon.installed_pyspark_first(path[:3]) == path[:3]
    # a Spark distribution's zip ($SPARK_HOME/python/lib, no pyspark package around it) stays
    dist = tmp_path / "spark-4.3.0-bin" / "python" / "lib"
    dist.mkdir(parents=True)
    (dist / "pyspark.zip").write_bytes(b"")
    other = [str(dist / "pyspark.zip"), str(site)]
    assert worker_daemon.installed_pyspark_first(other) == other


def test_spark_home_without_zip_links_the_package_and_leaves_python_lib_empty(tmp_path: Path) -> None:
    site, _zipped = _fake_site(tmp_path)
    home = site / "pyspark"
    cache = tmp_path / "cache"
    cache.mkdir()
    built = spark_home.spark_home_without_zip(home, cache)
    assert (built / "jars").resolve() == (home / "jars").resolve()
    assert (built / "bin").resolve() == (home / "bin").resolve()
    assert list((built / "python" / "lib").iterdir()) == []
    assert spark_home.spark_home_without_zip(home, cache) == built  # reused, not rebuilt
    (home / "version.py").write_text("__version__ = '9'\n")  # an upgrade gets its own directory
    assert spark_home.spark_home_without_zip(home, cache) != built


@pytest.mark.spark
def test_python_workers_import_the_installed_pyspark(spark: Any) -> None:
    import pyarrow as pa
    import pyspark

    def where(batches: Any) -> Any:
        import sys as worker_sys

        import pyspark as worker_pyspark

        for _ in batches:
            zips = [p for p in worker_sys.path if p.endswith("pyspark.zip") and os.path.exists(p)]
            yield pa.RecordBatch.from_pylist([{"module": worker_pyspark.__file__, "zips": len(zips)}])

    rows = spark.range(1).mapInArrow(where, "module string, zips long").collect()
    assert rows[0]["module"] == pyspark.__file__  # the driver's installed, precompiled package
    assert rows[0]["zips"] == 0


def test_python_workers_start_with_the_common_modules_imported_and_frozen(spark: Any) -> None:
    """The daemon imports what every worker needs before it forks them and freezes it, so the full
    ``gc.collect()`` pyspark runs after every task in a reused worker skips those objects."""
    import pyarrow as pa

    def state(batches: Any) -> Any:
        import gc

        for _ in batches:
            row = {"frozen": gc.get_freeze_count(), "tracked": len(gc.get_objects())}
            yield pa.RecordBatch.from_pylist([row])

    [row] = spark.range(1).coalesce(1).mapInArrow(state, "frozen long, tracked long").collect()
    assert row["frozen"] > 20_000, row  # pyspark's worker, pyarrow (pandas): skipped by every collection
    assert row["tracked"] < row["frozen"], row


def test_a_daemon_preloads_the_arrow_stack_only_for_the_workers_that_use_it() -> None:
    assert worker_daemon.worker_modules(["daemon.py", "pyspark.worker"]) == worker_daemon.PRELOADED
    assert worker_daemon.worker_modules(["daemon.py"]) == worker_daemon.PRELOADED  # pyspark's default
    planner = "pyspark.sql.worker.plan_data_source_read"
    assert worker_daemon.worker_modules(["daemon.py", planner]) == (planner,)


def test_preload_skips_modules_that_are_not_installed() -> None:
    code = ("import gc; from babelq.spark.worker_daemon import preload; "
            "print(preload(('json', 'babelq_no_such_module')), gc.get_freeze_count() > 0)")
    out = subprocess.run([os.environ.get("PYSPARK_PYTHON") or "python3", "-c", code], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "['json'] True"


def _java() -> str:
    found = class_archive._java_binary()
    if found is None:
        pytest.skip("no java on this machine")
    return str(found)


def test_class_archive_records_then_maps(tmp_path: Path) -> None:
    site, _ = _fake_site(tmp_path)
    (site / "pyspark" / "jars" / "a.jar").write_bytes(b"x")
    cache = tmp_path / "cache"
    cache.mkdir()
    first = class_archive.java_options(cache, site / "pyspark")
    assert first.startswith("-XX:ArchiveClassesAtExit=") and "-Xlog:cds*=off" in first
    part = Path(first.split()[0].split("=", 1)[1])
    assert part.name.endswith(f".{os.getpid()}.part")
    # the real JVM takes the recording options and writes the archive at exit, printing nothing
    recorded = subprocess.run([_java(), *first.split(), "-version"], check=False, capture_output=True,
                              text=True)
    assert recorded.returncode == 0, recorded.stderr
    assert "cds" not in (recorded.stdout + recorded.stderr).lower()
    assert part.stat().st_size > 0
    # while this process lives its recording may be unfinished: neither record nor map
    assert class_archive.java_options(cache, site / "pyspark") == ""
    dead = part.with_name(part.name.replace(f".{os.getpid()}.", ".999999999."))
    part.rename(dead)
    old = time.time() - 600
    os.utime(dead, (old, old))
    mapped = class_archive.java_options(cache, site / "pyspark")
    archive = class_archive.archive_path(cache, site / "pyspark")
    assert archive is not None and archive.exists() and not dead.exists()
    assert mapped == f"-XX:SharedArchiveFile={archive} -Xlog:cds*=off"
    # -Xshare:on makes the JVM refuse to start when it cannot map the archive
    used = subprocess.run([_java(), *mapped.split(), "-Xshare:on", "-version"], check=False,
                          capture_output=True, text=True)
    assert used.returncode == 0, used.stderr


def test_class_archive_is_named_by_the_jvm_and_the_jars(tmp_path: Path) -> None:
    site, _ = _fake_site(tmp_path)
    jars = site / "pyspark" / "jars"
    (jars / "a.jar").write_bytes(b"x")
    before = class_archive.archive_path(tmp_path, site / "pyspark")
    (jars / "b.jar").write_bytes(b"y")
    assert class_archive.archive_path(tmp_path, site / "pyspark") != before


def test_a_partial_recording_of_a_dead_process_is_dropped_when_the_archive_exists(tmp_path: Path) -> None:
    site, _ = _fake_site(tmp_path)
    archive = class_archive.archive_path(tmp_path, site / "pyspark")
    assert archive is not None
    archive.write_bytes(b"archive")
    stale = archive.with_name(archive.name + ".999999999.part")
    stale.write_bytes(b"late")
    old = time.time() - 600
    os.utime(stale, (old, old))
    assert class_archive.java_options(tmp_path, site / "pyspark").startswith("-XX:SharedArchiveFile=")
    assert not stale.exists() and archive.read_bytes() == b"archive"


def test_the_session_can_be_told_not_to_use_the_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from babelq.spark import session

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    on = session._with_class_archive({session.DRIVER_JAVA_OPTIONS: "-Xss4m"})
    assert on[session.DRIVER_JAVA_OPTIONS].startswith("-Xss4m -XX:")
    off = session._with_class_archive(
        {class_archive.ARCHIVE_CONF: "false", session.DRIVER_JAVA_OPTIONS: "-Xss4m"})
    assert off[session.DRIVER_JAVA_OPTIONS] == "-Xss4m"


@pytest.mark.spark
def test_the_driver_jvm_runs_with_babelqs_heap_growth_setting(spark: Any) -> None:
    """The option reaches the launched JVM (next to the class archive's and the log level's) and
    G1 took it: a driver that hosts the executors grows its heap only while collecting costs
    over a fifth of its time."""
    jvm = spark.sparkContext._jvm
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert "-XX:GCTimeRatio=4" in arguments, arguments
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
    assert bean.getVMOption("GCTimeRatio").getValue() == "4"
    assert bean.getVMOption("UseG1GC").getValue() == "true"

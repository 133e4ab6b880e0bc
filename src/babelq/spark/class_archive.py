"""A class-data sharing (AppCDS) archive for the driver's JVM: Spark starts on far less CPU.

A fresh Spark JVM loads, verifies and links some 15,000 classes before the first query is done,
and does it again in every process: ``babelq demo``, every CLI command, every test session.
Java 17 can record the classes a run loaded into an archive at exit
(``-XX:ArchiveClassesAtExit``) and map that archive, already parsed and verified, into the next
JVM (``-XX:SharedArchiveFile``), so a short Spark job stops paying most of its start-up.

:func:`java_options` gives the options for the next JVM this process launches:

* the archive exists: map it;
* it does not: record one when this JVM exits, into a file named after this process
  (``<archive>.<pid>.part``); the next session that finds such a file from a process that is
  gone renames it into place. A JVM that is killed while writing leaves a partial file that the
  next session would install; the JVM checks an archive's header before mapping it and runs
  without one that does not fit, so the cost of such a file is speed, never correctness
  (delete ``~/.cache/babelq/spark-classes-*`` to record a new one);
* a ``.part`` file younger than two minutes whose process may still be writing: neither.

The archive is named by what it depends on: the ``java`` binary Spark's launcher will run
(``$JAVA_HOME/bin/java``, else ``java`` on ``PATH``, resolved), and the Spark jars (names and
sizes). A JVM that finds the archive unusable anyway (another JVM build, another class path)
ignores it; CDS messages are switched off (``-Xlog:cds*=off``) so that neither case prints
anything. ``--conf spark.babelq.classArchive=false`` turns it off.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

from babelq.spark.shutdown import process_alive

#: the Spark setting that turns the archive off
ARCHIVE_CONF = "spark.babelq.classArchive"
#: a .part file younger than this may still be being written by a JVM that is exiting
_WRITING_SECONDS = 120.0
_QUIET = "-Xlog:cds*=off"


def _java_binary() -> Path | None:
    """The ``java`` Spark's launcher runs (``spark-class``: ``$JAVA_HOME/bin/java``, else ``PATH``)."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not found or not os.path.exists(found):
        return None
    return Path(found).resolve()


def archive_path(cache_dir: Path, spark_home: Path) -> Path | None:
    """Where the archive for this JVM and these Spark jars lives (None: no ``java`` found)."""
    java = _java_binary()
    jars = spark_home / "jars"
    if java is None or not jars.is_dir():
        return None
    key = hashlib.sha256()
    stat = java.stat()
    key.update(f"{java}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    for jar in sorted(jars.iterdir()):
        key.update(f"{jar.name}\0{jar.stat().st_size}\0".encode())
    return cache_dir / f"spark-classes-{key.hexdigest()[:16]}.jsa"


def _install_finished(archive: Path) -> bool:
    """Move a recording a finished process left into place; True when one may still be in progress."""
    writing = False
    for part in archive.parent.glob(f"{archive.name}.*.part"):
        try:
            pid = int(part.name[len(archive.name) + 1:-len(".part")])
            age = time.time() - part.stat().st_mtime
        except (ValueError, OSError):
            continue
        if process_alive(pid) or age < _WRITING_SECONDS:
            writing = True
            continue
        try:
            if archive.exists() or part.stat().st_size == 0:
                part.unlink()
            else:
                os.replace(part, archive)
        except OSError:  # another session got there first
            continue
    return writing


def java_options(cache_dir: Path, spark_home: Path) -> str:
    """The JVM options that use (or record) the archive; empty when there is nothing to do."""
    archive = archive_path(cache_dir, spark_home)
    if archive is None:
        return ""
    writing = _install_finished(archive)
    if archive.exists():
        return f"-XX:SharedArchiveFile={archive} {_QUIET}"
    if writing:
        return ""
    return f"-XX:ArchiveClassesAtExit={archive}.{os.getpid()}.part {_QUIET}"

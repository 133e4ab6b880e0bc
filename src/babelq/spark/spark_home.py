"""The ``$SPARK_HOME`` babelq launches its JVM with: pip's pyspark, minus the zipped copy of itself.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the path of every Python process it
starts: the data source's planner and writer, the streaming reader, the workers of Python UDFs
and ``mapInArrow``. When pyspark is pip-installed, ``$SPARK_HOME`` is the installed package, so
the zip holds the same modules as the package directory, but Python caches no bytecode for a
zip: every new process compiles the pyspark modules it imports from source, and a payments demo
starts six such processes in a row, most of them on the critical path.

:func:`spark_home_without_zip` builds, once per pyspark installation, a directory under
babelq's cache whose ``bin``, ``jars`` and ``sbin`` are links to the installed package's and
whose ``python/lib`` is empty. A JVM launched with it as ``$SPARK_HOME`` runs exactly the same
Spark, and its Python processes import the installed, precompiled pyspark (and py4j) instead.
:func:`babelq.spark.session.get_session` uses it only when that is certainly equivalent: nobody
set ``$SPARK_HOME`` to something else, pyspark is the pip package (it has ``jars``), and Spark's
Python processes on this host run this very interpreter, which has that pyspark installed.
Executors on other hosts keep their own ``$SPARK_HOME``; for them
:mod:`babelq.spark.worker_daemon` does the same for the UDF workers.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

#: the entries of the installed package the launcher and the JVM read from $SPARK_HOME
_LINKED = ("bin", "jars", "sbin", "conf", "kubernetes", "RELEASE")


def installed_pyspark_home() -> Path | None:
    """The installed pyspark package directory, when it is a full Spark home (the pip package
    ships ``jars``); None otherwise."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    return home if (home / "jars").is_dir() and (home / "bin").is_dir() else None


def spark_home_without_zip(home: Path, cache_dir: Path) -> Path:
    """A Spark home equivalent to ``home`` but without ``python/lib`` (built once, then reused).

    Named by a hash of ``home``'s path and its pyspark version file, so another installation or
    an upgrade gets its own directory; built under a temporary name and renamed, so concurrent
    sessions never see half of one.
    """
    version = (home / "version.py").read_bytes() if (home / "version.py").exists() else b""
    key = hashlib.sha256(str(home).encode() + b"\0" + version).hexdigest()[:16]
    target = cache_dir / f"spark-home-{key}"
    if (target / "jars").exists():
        return target
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=cache_dir))
    for name in _LINKED:
        if (home / name).exists():
            (scratch / name).symlink_to(home / name)
    (scratch / "python" / "lib").mkdir(parents=True)
    try:
        os.rename(scratch, target)
    except OSError:  # another session built it first: use theirs
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    return target

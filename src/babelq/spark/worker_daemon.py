"""Spark's Python worker daemon, importing pyspark from its installed, precompiled files.

Spark starts every Python worker with ``$SPARK_HOME/python/lib/pyspark.zip`` first on its path.
When pyspark is pip-installed, ``$SPARK_HOME`` *is* the installed package, so the zip holds the
very same modules as the package directory beside it, but Python cannot cache compiled bytecode
inside a zip: every new worker process compiles the pyspark modules it imports from source, and
Spark starts a separate daemon per worker module (the data source's writer, its commit, its
planner, UDFs...), each paying again.

:func:`babelq.spark.session.get_session` names this module as ``spark.python.daemon.module``.
It drops the zip from ``sys.path`` only when the zip is the installed package's own copy
(``<pyspark package>/python/lib/pyspark.zip``, so the same version by construction), then runs
pyspark's own daemon unchanged. With any other ``$SPARK_HOME`` (a Spark distribution) the path
is left as Spark built it. Before that it imports what the daemon's workers will import and
freezes it (:func:`preload`).
"""

from __future__ import annotations

import os
import runpy
import sys


def _package_owns(zip_path: str) -> bool:
    """Whether ``zip_path`` is ``<an installed pyspark package>/python/lib/pyspark.zip``."""
    home = os.path.dirname(os.path.dirname(os.path.dirname(zip_path)))
    return os.path.basename(home) == "pyspark" and os.path.isfile(os.path.join(home, "daemon.py")) \
        and os.path.isfile(os.path.join(home, "__init__.py"))


def installed_pyspark_first(path: list[str]) -> list[str]:
    """``path`` without the zipped pyspark whose installed package is also on ``path``."""
    on_path = {os.path.realpath(entry) for entry in path if entry}
    kept = []
    for entry in path:
        if os.path.basename(entry) == "pyspark.zip" and _package_owns(entry):
            home = os.path.dirname(os.path.dirname(os.path.dirname(entry)))
            if os.path.realpath(os.path.dirname(home)) in on_path:  # the installed copy is found instead
                continue
        kept.append(entry)
    return kept


#: What every Python worker of babelq's Spark jobs imports (pyspark's worker and its Arrow
#: serializers import pandas), imported once in the daemon that forks them (:func:`preload`).
PRELOADED = (
    "pyspark.worker", "pyarrow", "pandas", "pyspark.sql.pandas.serializers", "babelq.spark.datasource",
)


def preload(modules: tuple[str, ...] = PRELOADED) -> list[str]:
    """Import ``modules`` (those that are installed) and freeze what the process holds; returns
    the ones imported.

    Why: pyspark's daemon forks a worker per task slot, and a reused worker runs a full
    ``gc.collect()`` after every task. A worker holds about 80,000 tracked objects, most of them
    the modules above (pandas alone is some 300 modules), and each collect walks them all, a
    cost paid on every task. Imported here,
    before the fork, and frozen (``gc.freeze``), they are shared by every worker and skipped by
    its collections; the workers also stop importing them one by one.
    """
    import gc
    import importlib

    done = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # an optional module missing or broken: the worker imports it, or not, as before
            continue
        done.append(name)
    gc.freeze()
    return done


def worker_modules(argv: list[str]) -> tuple[str, ...]:
    """What to preload in a daemon started with ``argv``: Spark names the worker module the daemon
    serves as its first argument (``pyspark.worker`` runs UDFs, ``mapInArrow`` and the data
    source's reads; others plan or commit a data source's work and only need themselves)."""
    served = argv[1] if len(argv) > 1 and argv[1].startswith("pyspark") else "pyspark.worker"
    return PRELOADED if served == "pyspark.worker" else (served,)


def main() -> None:
    sys.path[:] = installed_pyspark_first(sys.path)
    preload(worker_modules(sys.argv))
    runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

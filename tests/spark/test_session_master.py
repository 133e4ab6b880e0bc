"""Which master ``get_session`` picks, and the babelq package it ships to executors.

The precedence (``babelq.spark.session``): the ``master`` argument (the CLI's ``--master``) >
``$BABELQ_SPARK_MASTER`` > a master Spark was already given (spark-submit / ``PYSPARK_SUBMIT_ARGS``,
``spark.master`` in ``spark-defaults.conf``) > ``local[2]``. One pytest process holds one
SparkContext (the session-wide ``spark`` fixture), so every resolution is checked in a fresh
Python process that starts its own JVM; they run side by side to keep the wall time down.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from cluster import make_bare_python
from spark_defaults import DEFAULTS, isolated_env

pytest.importorskip("pyspark")

from babelq.spark import session as spark_session

PROBE = """
import json, sys
from babelq.spark.session import get_session
kwargs = json.loads(sys.argv[1])
spark = get_session("babelq-probe", **kwargs)
sc = spark.sparkContext
seen = {"master": sc.master, "python": sc.pythonExec, "includes": list(sc._python_includes)}
print("PROBE " + json.dumps(seen))
spark.stop()
"""


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An interpreter that has pyspark and babelq's dependencies but not babelq."""
    return make_bare_python(tmp_path_factory.mktemp("bare-env"))


def test_is_local_master() -> None:
    for master in ("local", "local[2]", "local[*]", "local[2,3]"):
        assert spark_session.is_local_master(master), master
    # local-cluster runs separate executor JVMs in their own directories: not local for babelq
    for master in ("spark://127.0.0.1:7077", "local-cluster[2,1,1024]", "yarn", "k8s://https://h:6443", ""):
        assert not spark_session.is_local_master(master), master


def test_explicit_master_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(spark_session.MASTER_ENV, raising=False)
    assert spark_session.explicit_master(None, {}) is None  # Spark decides, then local[2]
    assert spark_session.explicit_master(None, {"spark.master": "local[3]"}) == "local[3]"
    monkeypatch.setenv(spark_session.MASTER_ENV, "spark://env:7077")
    assert spark_session.explicit_master(None, {}) == "spark://env:7077"
    assert spark_session.explicit_master(None, {"spark.master": "local[3]"}) == "local[3]"
    assert spark_session.explicit_master("spark://arg:7077", {"spark.master": "local[3]"}) == "spark://arg:7077"
    monkeypatch.setenv(spark_session.MASTER_ENV, "  ")
    assert spark_session.explicit_master(None, {}) is None


def _probe(env: dict[str, str], kwargs: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    scrubbed = ("MASTER", "SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS", "PYSPARK_PYTHON", spark_session.MASTER_ENV)
    full = isolated_env(scrubbed)
    full.update(env)
    return subprocess.Popen(
        [sys.executable, "-c", PROBE, json.dumps(kwargs)],
        cwd=cwd,
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.slow
@pytest.mark.spark
def test_master_resolution_in_fresh_processes(tmp_path: Path, bare_python: Path) -> None:
    """Each row is a process of its own: (env, get_session kwargs) -> the master it runs on."""
    defaults = tmp_path / "conf"
    defaults.mkdir()
    (defaults / "spark-defaults.conf").write_text(f"{DEFAULTS}spark.master   local[3]\n")
    rows = {
        # also: spark.pyspark.python among the settings is the interpreter Python workers run
        "nothing given: the fallback": ({}, {"spark.pyspark.python": str(bare_python)}, "local[2]"),
        "spark-defaults.conf wins over the fallback": ({"SPARK_CONF_DIR": str(defaults)}, {}, "local[3]"),
        "PYSPARK_SUBMIT_ARGS --master wins over the fallback": (
            {"PYSPARK_SUBMIT_ARGS": "--master local[3] pyspark-shell"}, {}, "local[3]"),
        "BABELQ_SPARK_MASTER wins over spark-defaults.conf": (
            {"SPARK_CONF_DIR": str(defaults), spark_session.MASTER_ENV: "local[1]"}, {}, "local[1]"),
    }
    # (the argument over $BABELQ_SPARK_MASTER is test_explicit_master_precedence: no JVM needed)
    procs = {name: _probe(env, kwargs, tmp_path) for name, (env, kwargs, _) in rows.items()}
    seen: dict[str, dict[str, object]] = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=240)
        lines = [line for line in out.decode().splitlines() if line.startswith("PROBE ")]
        assert proc.returncode == 0 and lines, f"{name}: exit {proc.returncode}\n{err.decode()[-3000:]}"
        seen[name] = json.loads(lines[-1][len("PROBE "):])
    for name, (_, kwargs, master) in rows.items():
        assert seen[name]["master"] == master, name
        assert seen[name]["includes"] == [], f"{name}: a local session ships nothing"
        assert seen[name]["python"] == kwargs.get("spark.pyspark.python", sys.executable), name


def test_package_zip_holds_the_package_and_is_cached(tmp_path: Path) -> None:
    first = spark_session.package_zip(cache_dir=tmp_path)
    assert first.parent == tmp_path and first.suffix == ".zip"
    with zipfile.ZipFile(first) as zf:
        names = set(zf.namelist())
    assert "babelq/__init__.py" in names
    assert "babelq/spark/jvm/babelq-spark.jar" in names  # package data travels with the code
    assert "babelq/py.typed" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    inode = first.stat().st_ino
    again = spark_session.package_zip(cache_dir=tmp_path)
    assert again == first and again.stat().st_ino == inode  # reused, not rebuilt (a rebuild is renamed in)


def test_package_zip_name_follows_the_content(tmp_path: Path) -> None:
    package = tmp_path / "src" / "babelq"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("X = 1\n")
    one = spark_session.package_zip(package_dir=package, cache_dir=tmp_path / "cache")
    (package / "__init__.py").write_text("X = 2\n")
    two = spark_session.package_zip(package_dir=package, cache_dir=tmp_path / "cache")
    assert one != two and one.exists() and two.exists()


def test_package_zip_is_importable_where_babelq_is_not_installed(tmp_path: Path, bare_python: Path) -> None:
    """What an executor does with the shipped file: put it on sys.path and import from it."""
    bundle = spark_session.package_zip(cache_dir=tmp_path)
    code = (
        "import sys\n"
        "try:\n    import babelq\nexcept ModuleNotFoundError:\n    print('not installed')\n"
        f"sys.path.insert(0, {str(bundle)!r})\n"
        "import babelq.spark.datasource, babelq.pipelines.ingest, babelq.transports.redis\n"
        "print(babelq.__file__)\n"
    )
    done = subprocess.run(
        [str(bare_python), "-c", code], capture_output=True, cwd=tmp_path, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    assert lines[0] == "not installed"
    assert lines[1].startswith(str(bundle))


def test_package_zip_prunes_zips_unused_for_two_weeks(tmp_path: Path) -> None:
    package = tmp_path / "src" / "babelq"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("X = 1\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    stale, recent = cache / "babelq-0.0.1-stale.zip", cache / "babelq-0.0.1-recent.zip"
    for old in (stale, recent):
        old.write_bytes(b"PK")
    month_ago = time.time() - 30 * 86_400
    os.utime(stale, (month_ago, month_ago))
    made = spark_session.package_zip(package_dir=package, cache_dir=cache)
    assert made.exists() and recent.exists() and not stale.exists()
    os.utime(made, (month_ago, month_ago))
    assert spark_session.package_zip(package_dir=package, cache_dir=cache) == made
    assert made.stat().st_mtime > month_ago + 86_400  # reuse counts as use


def test_call_site_capture_is_off_by_default_and_the_caller_wins() -> None:
    """PySpark's DataFrame call-site capture costs five Py4J round trips per Column function; the
    session get_session builds has it off, and a caller's setting wins over that default."""
    settings = spark_session._settings("local[1]", {})[1]
    assert settings[spark_session.DEBUGGING_CONF] == "false"
    mine = spark_session._settings("local[1]", {spark_session.DEBUGGING_CONF: "true"})[1]
    assert mine[spark_session.DEBUGGING_CONF] == "true"


def test_python_workers_get_a_handshake_timeout_that_survives_a_loaded_machine() -> None:
    """Spark gives a new Python worker 15 s to answer its handshake, which a worker importing
    pyspark and pandas on a busy machine can miss; babelq's session gives it longer, and a
    caller's setting still wins."""
    settings = spark_session._settings("local[1]", {})[1]
    assert settings[spark_session.PYTHON_HANDSHAKE_CONF] == "120s"
    mine = spark_session._settings("local[1]", {spark_session.PYTHON_HANDSHAKE_CONF: "30s"})[1]
    assert mine[spark_session.PYTHON_HANDSHAKE_CONF] == "30s"

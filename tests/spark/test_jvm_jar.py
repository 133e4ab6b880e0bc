"""babelq's JVM helpers: the shipped jar matches its Java sources, loads, and is optional.

``babelq-spark.jar`` is committed (users and CI need no JDK compiler); its manifest records a
digest of ``jvm/src``, so editing a Java file without running ``jvm/build.py`` fails here.
Where the same javac is on the machine, the classes are also recompiled and compared byte for
byte, which proves the committed classes were built from the committed sources.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from babelq.spark import jvm

ROOT = Path(__file__).resolve().parents[2]


def _build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("babelq_jvm_build", ROOT / "jvm" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _manifest() -> dict[str, str]:
    with zipfile.ZipFile(jvm.JAR) as jar:
        text = jar.read("META-INF/MANIFEST.MF").decode()
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


def test_the_jar_was_built_from_the_current_sources() -> None:
    build = _build_module()
    assert jvm.JAR.exists(), "run: .venv/bin/python jvm/build.py"
    assert _manifest()["Babelq-Source-Digest"] == build.source_digest(), (
        "jvm/src changed since the jar was built: run .venv/bin/python jvm/build.py"
    )


def test_recompiling_the_sources_gives_the_committed_classes() -> None:
    pytest.importorskip("pyspark")
    javac = shutil.which("javac")
    if javac is None:
        pytest.skip("no javac on this machine: only the source digest is checked")
    version = subprocess.run([javac, "-version"], check=True, capture_output=True, text=True).stdout.strip()
    if version != _manifest()["Babelq-Javac"]:
        pytest.skip(f"{version} differs from the jar's {_manifest()['Babelq-Javac']}: class bytes may differ")
    build = _build_module()
    with tempfile.TemporaryDirectory() as tmp:
        fresh = build.compile_classes(Path(tmp))
    with zipfile.ZipFile(jvm.JAR) as jar:
        shipped = {name: jar.read(name) for name in jar.namelist() if name.endswith(".class")}
    assert fresh == shipped


@pytest.mark.spark
def test_babelq_sessions_load_the_helpers(spark: Any) -> None:
    assert jvm.scanner(spark) == jvm.SCAN_FUNCTION
    assert jvm.float_repr(spark) == jvm.FLOAT_FUNCTION
    f = jvm.FLOAT_FUNCTION
    row = spark.sql(f"SELECT {f}(1e22D) AS r, {f}(CAST(NULL AS DOUBLE)) AS n").first()
    assert (row["r"], row["n"]) == (repr(1e22), None)


class _NoJarSession:
    """Stands in for a session whose classpath lacks the jar and which refuses ADD JAR
    (Spark Connect, a locked-down cluster): only the fallback decision is under test."""

    class _Udf:
        def registerJavaFunction(self, *args: Any) -> None:
            raise RuntimeError("ClassNotFoundException: babelq.spark.EnvelopeScan")

    udf = _Udf()

    def sql(self, text: str) -> None:
        raise RuntimeError("ADD JAR is not allowed here")


def test_without_the_jar_the_callers_are_told_to_use_their_sql_paths(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = _NoJarSession()
    with caplog.at_level(logging.WARNING, logger="babelq.spark.jvm"):
        assert jvm.scanner(session) is None
        assert jvm.scanner(session) is None  # decided once per session
    assert jvm.float_repr(session) is None
    warnings = [r for r in caplog.records if "not on this Spark session's classpath" in r.getMessage()]
    assert len(warnings) == 1 and jvm.jar_path() in warnings[0].getMessage()

"""Spark's own output on the user's screen: ``spark.babelq.logLevel`` and the JVM's stderr filter.

What the settings and the filter do is checked here without a JVM; that a real driver JVM
launched at ``WARN`` (what ``babelq -v`` sets) prints Spark's warnings again is one launch (no
SparkContext); that a CLI command without ``-v`` prints none is ``tests/cli/test_cli_spark_output.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from babelq.errors import ConfigurationError
from babelq.spark import jvm_output, log_level
from spark_defaults import isolated_env


def test_the_quiet_file_is_used_only_when_asked_and_never_over_the_users_own(tmp_path: Path) -> None:
    quiet = {log_level.LOG_LEVEL_CONF: "error"}
    option = log_level.launch_java_options(quiet, "", env={})
    assert option == f"-Dlog4j2.configurationFile={log_level.QUIET_FILE.as_uri()}"
    assert log_level.QUIET_FILE.is_file()
    assert log_level.launch_java_options({}, "", env={}) == ""  # library use: Spark's own defaults
    assert log_level.launch_java_options({log_level.LOG_LEVEL_CONF: "WARN"}, "", env={}) == ""
    mine = "-Dlog4j2.configurationFile=/etc/spark/log4j2.xml"
    assert log_level.launch_java_options(quiet, mine, env={}) == ""
    (tmp_path / "log4j2.properties").write_text("rootLogger.level = info\n")
    assert log_level.launch_java_options(quiet, "", env={"SPARK_CONF_DIR": str(tmp_path)}) == ""
    assert log_level.launch_java_options(quiet, "", env={"SPARK_HOME": str(tmp_path.parent)}) != ""


def test_the_context_level_is_the_chosen_one_else_error() -> None:
    assert log_level.context_level({}) == "ERROR"
    assert log_level.context_level({log_level.LOG_LEVEL_CONF: " warn "}) == "WARN"
    with pytest.raises(ConfigurationError, match=r"spark\.babelq\.logLevel: 'LOUD' is not a log level"):
        log_level.context_level({log_level.LOG_LEVEL_CONF: "loud"})


def test_the_jvm_stderr_filter_drops_only_its_start_up_line() -> None:
    source_read, source_write = os.pipe()
    target_read, target_write = os.pipe()
    copier = threading.Thread(target=jvm_output._copy, args=(source_read, target_write))
    copier.start()
    os.write(source_write, b"WARNING: Using incubator modules: jdk.incubator.vector\n")
    os.write(source_write, b"12:00:01 ERROR Executor: boom\n")
    os.write(source_write, b"Traceback (most recent call last):\n  no newline at the end")
    os.close(source_write)
    copier.join(5)
    os.close(target_write)
    with os.fdopen(target_read, "rb") as out:
        assert out.read() == (b"12:00:01 ERROR Executor: boom\nTraceback (most recent call last):\n"
                              b"  no newline at the end")


@pytest.mark.spark
@pytest.mark.slow
def test_a_verbose_launch_shows_sparks_warnings_again() -> None:
    """The driver JVM alone (no SparkContext: a few seconds), launched in a subprocess at the level
    ``babelq -v`` gives a Spark command: Spark's own start-up output and WARN records are back."""
    pytest.importorskip("pyspark")
    code = (
        "from babelq.spark.session import launch_jvm\n"
        f"launch_jvm('local[1]', **{{{log_level.LOG_LEVEL_CONF!r}: 'WARN'}})\n"
    )
    env = isolated_env(("PYSPARK_GATEWAY_PORT",))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "Using Spark's default log4j profile" in done.stderr
    assert " WARN " in done.stderr, done.stderr

"""What a Spark command prints on stderr when it is not a terminal: babelq's progress lines, none of
Spark's start-up banners, WARN or ERROR records. One ``babelq ingest`` in a subprocess on a tiny file
(the only way to see what the driver JVM itself writes); ``-v`` asks for Spark's ``WARN`` level,
which brings its warnings back (a JVM launched at that level: ``tests/spark/test_log_level.py``)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from babelq.cli.spark_options import session_defaults
from babelq.pipelines.progress import Progress
from babelq.spark.log_level import LOG_LEVEL_CONF
from spark_defaults import isolated_env

JAVA_TRACE = re.compile(r"^(\tat |Caused by: |(?:[a-z]+\.)+[A-Za-z.$]*(?:Exception|Error)\b)")


def test_spark_is_quiet_unless_verbose_and_its_metrics_live_when_progress_shows() -> None:
    assert session_defaults(argparse.Namespace(verbose=0)) == {LOG_LEVEL_CONF: "ERROR"}
    assert session_defaults(argparse.Namespace(verbose=1)) == {LOG_LEVEL_CONF: "WARN"}
    shown = session_defaults(argparse.Namespace(verbose=2), Progress.lines())
    assert shown == {LOG_LEVEL_CONF: "WARN", "spark.executor.heartbeatInterval": "2s"}
    assert session_defaults(argparse.Namespace(verbose=0), Progress.off()) == {LOG_LEVEL_CONF: "ERROR"}


@pytest.mark.spark
@pytest.mark.slow
def test_ingest_shows_progress_lines_and_none_of_sparks_noise(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    from babelq.pipelines.generator import generate_bulk_file

    generate_bulk_file(tmp_path / "payments.csv", 60, seed=7)
    env = isolated_env(("PYSPARK_GATEWAY_PORT",))
    done = subprocess.run(
        [sys.executable, "-m", "babelq.cli.main", "ingest", str(tmp_path / "payments.csv"),
         "--broker", f"sqlite:///{tmp_path}/q.db", "--rejects", str(tmp_path / "rejects")],
        capture_output=True, text=True, timeout=280, env=env, cwd=tmp_path, check=False,
    )
    assert done.returncode == 0, done.stderr
    published = int(re.search(r"([\d,]+) published to payments", done.stdout).group(1).replace(",", ""))  # type: ignore[union-attr]
    err = done.stderr.splitlines()
    noise = [line for line in err if " WARN " in line or "log4j" in line or "default log level" in line
             or line.startswith("WARNING:") or "setLogLevel" in line]
    # Spark's ERROR records (an RPC failure it ignores while the context stops) and Java stack traces
    noise += [line for line in err if " ERROR " in line or JAVA_TRACE.match(line)]
    assert noise == [], done.stderr
    assert not any(line.startswith("\x1b") or "\r" in line for line in err)  # lines, no bars: not a terminal
    last = f"stage ingest.publish: {published:,} / {published:,} rows (100%)"
    assert any(last in line for line in err), done.stderr
    assert any(line.endswith(" stage ingest.validate: started") for line in err)

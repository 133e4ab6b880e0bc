"""How much of Spark's own JVM log reaches the screen: ``spark.babelq.logLevel``.

A Spark driver JVM writes its log records straight to the process's stderr, outside Python's
``logging``. While it starts, before any SparkContext exists to call ``setLogLevel`` on, Spark's
default configuration prints which profile it loaded, warns that the hostname resolves to a
loopback address and that there is no native Hadoop library, and announces a "default log
level". None of it is something the person running ``babelq demo`` can act on, and it is drawn
over the progress display.

``spark.babelq.logLevel`` (a babelq setting among the session's Spark settings; babelq's CLI
sets it from ``-v``) chooses the level:

* ``ERROR`` (or ``FATAL``, ``OFF``): the JVM is launched with babelq's log4j2 file
  (``log4j2-quiet.properties``: FATAL records only on stderr, nothing announced); once the
  context exists its level is set too. A failure that ends the command still reaches the
  person: it comes back to the driver as an exception, which the CLI prints as one line; what
  the file keeps off the screen is Spark's own record of it, repeated by every task that met
  it, and the errors Spark ignores itself. The one line the JVM itself prints at start (an
  incubator module in use) is dropped from its stderr (:mod:`babelq.spark.jvm_output`).
* ``WARN``, ``INFO``, ``DEBUG``...: Spark's own configuration at launch (its warnings and banners
  included), then the context's level is set to this one.
* unset: what :func:`babelq.spark.session.get_session` always did, Spark's configuration at
  launch and ``ERROR`` once the context exists.

A log4j2 configuration the user gave wins over the quiet file: ``-Dlog4j2.configurationFile`` in
``spark.driver.extraJavaOptions``, or a ``log4j2.*`` file in ``$SPARK_CONF_DIR`` (else
``$SPARK_HOME/conf``), which spark-submit puts on the JVM's class path.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from babelq.errors import ConfigurationError

#: the babelq setting naming Spark's log level (see the module docstring)
LOG_LEVEL_CONF = "spark.babelq.logLevel"
#: the level a context gets when nobody chose one
DEFAULT_LEVEL = "ERROR"
#: babelq's log4j2 file: FATAL records only on stderr, no start-up banners
QUIET_FILE = Path(__file__).resolve().with_name("log4j2-quiet.properties")

_LEVELS = ("OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "ALL")
_QUIET_LEVELS = frozenset({"OFF", "FATAL", "ERROR"})
_LOG4J_PROPERTY = "log4j2.configurationFile"
_LOG4J_FILES = ("log4j2.properties", "log4j2.xml", "log4j2.yaml", "log4j2.yml", "log4j2.json")


def chosen_level(settings: Mapping[str, str]) -> str | None:
    """The level ``spark.babelq.logLevel`` names, upper-cased; None when unset. A name log4j does
    not know is a one-line ConfigurationError (Spark would fail on it only after starting)."""
    value = (settings.get(LOG_LEVEL_CONF) or "").strip().upper()
    if not value:
        return None
    if value not in _LEVELS:
        raise ConfigurationError(
            f"{LOG_LEVEL_CONF}: {value!r} is not a log level; use one of {', '.join(_LEVELS)}")
    return value


def context_level(settings: Mapping[str, str]) -> str:
    """The level the SparkContext is set to once it exists."""
    return chosen_level(settings) or DEFAULT_LEVEL


def user_log_config(driver_java_options: str, env: Mapping[str, str] | None = None) -> bool:
    """Whether the user configured log4j2 themselves (then babelq's file is not used)."""
    if _LOG4J_PROPERTY in driver_java_options:
        return True
    env = os.environ if env is None else env
    home = env.get("SPARK_HOME")
    conf_dir = env.get("SPARK_CONF_DIR") or (os.path.join(home, "conf") if home else "")
    return bool(conf_dir) and any(os.path.isfile(os.path.join(conf_dir, name)) for name in _LOG4J_FILES)


def quiet(settings: Mapping[str, str]) -> bool:
    """Whether the chosen level keeps Spark's start-up output off the screen (ERROR or quieter)."""
    return chosen_level(settings) in _QUIET_LEVELS


def launch_java_options(settings: Mapping[str, str], driver_java_options: str,
                        env: Mapping[str, str] | None = None) -> str:
    """The driver JVM options that apply the chosen level from the JVM's first line: babelq's quiet
    file for ERROR and quieter, nothing otherwise (or when the user has a log4j2 configuration)."""
    if not quiet(settings) or not QUIET_FILE.is_file() or user_log_config(driver_java_options, env):
        return ""
    return f"-D{_LOG4J_PROPERTY}={QUIET_FILE.as_uri()}"

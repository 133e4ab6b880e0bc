"""The Spark configuration directory of every JVM the tests start: ``tests/spark_conf``.

``tests/conftest.py`` sets ``$SPARK_CONF_DIR`` to it. A test that shuts out the caller's Spark
configuration (a user's ``spark-defaults.conf`` could name a master, say) points its process at
this directory instead (:func:`isolated_env`); a test that writes a ``spark-defaults.conf`` of its
own starts it with :data:`DEFAULTS`, so its JVMs get the same options.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

CONF_DIR = Path(__file__).resolve().parent / "spark_conf"
#: the directory's spark-defaults.conf, to begin a test's own
DEFAULTS = (CONF_DIR / "spark-defaults.conf").read_text(encoding="utf-8")


def isolated_env(scrubbed: Iterable[str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (this process's environment) without ``scrubbed``, with the tests' Spark
    configuration directory as ``$SPARK_CONF_DIR``."""
    drop = set(scrubbed)
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in drop}
    env["SPARK_CONF_DIR"] = str(CONF_DIR)
    return env

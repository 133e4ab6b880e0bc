#!/usr/bin/env python3
"""The project's two front doors: ``python3 dev.py demo`` and ``python3 dev.py test``.

Each command creates (or reuses) ``.venv`` next to this file, installs the package with
the extras it needs (the demo's for ``demo`` and ``babelq``, the whole development set for
``test`` and ``bench``) when they are missing or ``pyproject.toml`` changed, and then runs
inside it. Only
Python 3.11+ (and Java 17 for Spark) must be on the machine beforehand.

Commands:
  demo [ARGS...]   run the product's main job (``babelq demo``; ARGS go to it)
  test [ARGS...]   lint (ruff), type-check (mypy --strict) and run the whole test suite
  bench [NAME]     run the benchmarks under bench/ (all, or the one named)
  babelq [ARGS...] run the babelq CLI inside the environment
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
STAMP = VENV / ".dev-stamp"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"


#: the extras each command installs: the demo and the CLI get the package with what the demo
#: touches (Spark, and the Redis and PostgreSQL clients its --broker and --ledger take), and the
#: test and bench commands add the whole development set on top, in the same venv
DEMO_EXTRAS = ("spark", "redis", "postgres")
EXTRAS = {"demo": DEMO_EXTRAS, "babelq": DEMO_EXTRAS, "test": ("dev",), "bench": ("dev",)}


def _installed(stamp: str, pyproject_sha: str) -> tuple[bool, set[str]]:
    """``(up to date, extras installed)`` read from the stamp: JSON with the pyproject.toml hash
    and the extras; a bare hash is the older stamp, written after installing ``[dev]``."""
    stamp = stamp.strip()
    if not stamp:
        return False, set()
    try:
        data = json.loads(stamp)
    except ValueError:
        return stamp == pyproject_sha, {"dev"}
    if not isinstance(data, dict):
        return False, set()
    extras = {str(e) for e in data.get("extras", [])}
    return data.get("pyproject") == pyproject_sha, extras


def extras_to_install(stamp: str, pyproject_sha: str, wanted: tuple[str, ...]) -> list[str] | None:
    """The extras to (re)install the package with, or None when the venv already has them.

    ``dev`` includes every other extra, so a venv that has it needs nothing more. A changed
    pyproject.toml reinstalls what was there plus what is wanted, so ``dev.py test`` after a
    dependency change still finds its tools."""
    current, have = _installed(stamp, pyproject_sha)
    if current and ("dev" in have or set(wanted) <= have):
        return None
    union = have | set(wanted)
    return ["dev"] if "dev" in union else sorted(union)


def _ensure_env(cmd: str) -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - dev.py runs under whatever python3 the machine has
        sys.exit("babelq needs Python 3.11 or newer; this is " + sys.version.split()[0])
    if not PY.exists():
        print(f"[dev] creating virtual environment in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    have = STAMP.read_text() if STAMP.exists() else ""
    extras = extras_to_install(have, want, EXTRAS.get(cmd, DEMO_EXTRAS))
    if extras is not None:
        spec = ",".join(extras)
        print(f"[dev] installing babelq[{spec}] (first run, new pyproject or {cmd} needs it)", flush=True)
        subprocess.check_call([str(PY), "-m", "pip", "install", "-q", "--upgrade", "pip"])
        subprocess.check_call([str(PY), "-m", "pip", "install", "-q", "-e", f"{ROOT}[{spec}]"])
        STAMP.write_text(json.dumps({"pyproject": want, "extras": extras}) + "\n")
    # The editable install runs src/ itself. Where PYTHONDONTWRITEBYTECODE is set (this project's
    # CI machine sets it) Python never caches its bytecode, and each of the dozen Python processes
    # Spark starts in a demo compiles babelq's modules again (about 3 s of CPU in all): compile
    # what changed once, as an installed package would have it.
    subprocess.check_call([str(PY), "-m", "compileall", "-q", str(ROOT / "src" / "babelq")])


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(VENV)
    # Spark's Python workers must run the venv's interpreter, not whatever python3 is on PATH.
    env.setdefault("PYSPARK_PYTHON", str(PY))
    env.setdefault("PYSPARK_DRIVER_PYTHON", str(PY))
    return env


def _run(args: list[str]) -> int:
    """Run ``args`` and return its exit code. On Ctrl-C the child gets the SIGINT too (a terminal
    sends it to both; it is passed on in case only this process got it) and is waited for: it
    ends its own processes and says so in one line, which is then the last word."""
    with subprocess.Popen(args, cwd=ROOT, env=_env()) as child:
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:
                child.send_signal(signal.SIGINT)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(__doc__)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd not in EXTRAS:  # before any install: a typo must not build a venv
        print(f"unknown command {cmd!r}\n{__doc__}", file=sys.stderr)
        return 2
    _ensure_env(cmd)
    if cmd == "demo":
        return _run([str(BIN / "babelq"), "demo", *rest])
    if cmd == "test":
        for step in (
            [str(PY), "-m", "ruff", "check", "src", "tests", "bench", "dev.py"],
            [str(PY), "-m", "mypy"],
        ):
            shown = " ".join(Path(step[0]).name if i == 0 else a for i, a in enumerate(step))
            print("[dev] " + shown, flush=True)
            code = _run(step)
            if code:
                return code
        return _run([str(PY), "-m", "pytest", *rest])
    if cmd == "bench":
        exact = ROOT / "bench" / f"bench_{rest[0]}.py" if rest else None
        # "settle" names bench_settle.py, not every bench with "settle" in its name
        names = [exact] if exact is not None and exact.exists() else sorted(
            p for p in (ROOT / "bench").glob("bench_*.py") if not rest or rest[0] in p.stem
        )
        code = 0
        for path in names:
            print(f"[dev] {path.name}", flush=True)
            code |= _run([str(PY), str(path), *rest[1:]])
        return code
    return _run([str(BIN / "babelq"), *rest])


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:  # in dev.py's own steps (creating the venv): one line, as babelq's
        print("dev.py: interrupted", file=sys.stderr)
        sys.exit(130)

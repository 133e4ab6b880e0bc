"""Every file in examples/ runs, as a user would run it, and ends well.

Each example is started the way its docstring says (the Python ones with this interpreter, the
shell one with ``sh``) in a scratch directory, so a renamed API or a changed default breaks
this test instead of the reader's first try. The payments example runs with a small file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PYTHON_EXAMPLES = sorted(p.name for p in EXAMPLES.glob("*.py"))
#: arguments an example needs to stay small (the payments pipeline's row count)
ARGS = {"payments_pipeline.py": ["300"]}
#: the examples that start Spark
SPARK_EXAMPLES = (
    "payments_pipeline.py", "orders_pipeline.py", "orders_parquet_pipeline.py", "publish_orders.py"
)


def _run(args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["BABELQ"] = str(Path(bin_dir) / "babelq")
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_the_list_of_examples_is_not_empty() -> None:
    assert len(PYTHON_EXAMPLES) >= 5


@pytest.mark.parametrize("name", PYTHON_EXAMPLES)
def test_python_example_runs(name: str, tmp_path: Path) -> None:
    timeout = 240 if name in SPARK_EXAMPLES else 90
    done = _run([sys.executable, str(EXAMPLES / name), *ARGS.get(name, [])], tmp_path, timeout)
    tail = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, f"{name} exited {done.returncode}\n{tail}"


def test_shell_example_runs() -> None:
    # "Run from the repository root" (it reads tests/conformance); it writes nothing there
    done = _run(["sh", str(EXAMPLES / "encode_and_inspect.sh")], EXAMPLES.parent, 60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not every body is accepted" in done.stdout and "1 accepted, 1 rejected, 1 poison" in done.stdout

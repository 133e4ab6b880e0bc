"""Ctrl-C during ``python3 dev.py demo`` (or any command dev.py runs): the child's one line is the
last word, and dev.py exits with the child's code, without a traceback of its own.

dev.py's ``_run`` is driven in a subprocess with a stand-in child that answers SIGINT the way
``babelq`` does (one line, exit 130); SIGINT goes to the dev.py process only, so the test also
proves dev.py passes it on rather than killing the child or leaving it running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT

CHILD = """\
import signal
import sys
from pathlib import Path


def interrupted(_signum, _frame):
    print("child: interrupted", file=sys.stderr, flush=True)
    sys.exit(130)


signal.signal(signal.SIGINT, interrupted)
Path(sys.argv[1]).touch()
while True:
    signal.pause()
"""


def test_dev_py_passes_ctrl_c_to_its_child_and_ends_with_the_childs_line(tmp_path: Path) -> None:
    (tmp_path / "child.py").write_text(CHILD)
    ready = tmp_path / "ready"
    runner = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); import dev; "
        f"sys.exit(dev._run([sys.executable, {str(tmp_path / 'child.py')!r}, {str(ready)!r}]))"
    )
    dev = subprocess.Popen([sys.executable, "-c", runner], stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():  # the child runs: dev.py is waiting for it
            assert dev.poll() is None, dev.communicate()[1].decode()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(dev.pid, signal.SIGINT)  # dev.py only: it must pass the interrupt on
        _, err = dev.communicate(timeout=60)
    finally:
        if dev.poll() is None:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait()
    assert err.decode() == "child: interrupted\n"
    assert dev.returncode == 130

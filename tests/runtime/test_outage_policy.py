"""The one outage policy of the long-running commands (babelq.runtime.outage.OutagePolicy)."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from babelq.cli.commands import OUTAGE_SECONDS
from babelq.cli.main import build_parser
from babelq.errors import ConfigurationError, OutageTooLongError, UnavailableError
from babelq.runtime.outage import DEFAULT_OUTAGE_SECONDS, OutagePolicy, names_outage
from conftest import ROOT
from spark_defaults import isolated_env

LONG_RUNNING = ("settle", "consume", "relay", "worker")
BABELQ = ROOT / ".venv" / "bin" / "babelq"


class _Flaky:
    """Fails with ``error`` the first ``failures`` calls, then answers."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "ok"


def test_an_outage_shorter_than_the_bound_is_waited_out_with_one_line_per_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    action = _Flaky(3, UnavailableError("cannot reach redis://127.0.0.1:1/0"))
    reconnects: list[int] = []
    with caplog.at_level(logging.WARNING, logger="babelq.outage"):
        got = OutagePolicy(60).wait_out(action, "broker redis://127.0.0.1:1/0", sleep=lambda s: None,
                                        reconnect=lambda: reconnects.append(1))
    assert got == "ok" and action.calls == 4 and len(reconnects) == 3
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert lines[0].startswith("broker redis://127.0.0.1:1/0 unavailable (attempt 1, retrying in ")
    assert lines[0].endswith(" s): cannot reach redis://127.0.0.1:1/0")


def test_past_the_bound_the_wait_ends_in_one_line_naming_the_option() -> None:
    action = _Flaky(10**9, UnavailableError("database or disk is full: /tmp/l.db"))
    with pytest.raises(OutageTooLongError) as raised:
        OutagePolicy(0).wait_out(action, "ledger", sleep=lambda s: None)
    text = str(raised.value)
    assert "\n" not in text and action.calls == 1
    assert text.startswith("ledger unavailable for more than 0 s (--outage-timeout): ")
    assert "database or disk is full" in text
    assert "run the command again" in text


def test_an_error_that_is_not_an_outage_is_not_retried() -> None:
    action = _Flaky(1, ValueError("a bug"))
    with pytest.raises(ValueError, match="a bug"):
        OutagePolicy(60).wait_out(action, "sink", sleep=lambda s: None)
    assert action.calls == 1


@pytest.mark.parametrize(("text", "outage"), [
    ("org.apache.spark.api.python.PythonException: babelq.errors.UnavailableError: cannot reach", True),
    ("redis.exceptions.ConnectionError: Error 111 connecting to 127.0.0.1:6380", True),
    ("babelq.errors.OutageTooLongError: ledger unavailable for more than 3 s: UnavailableError", False),
    ("babelq.errors.ConfigurationError: --ledger: no such table", False),
])
def test_a_query_error_is_an_outage_by_its_text(text: str, outage: bool) -> None:
    assert names_outage(text) is outage


@pytest.mark.parametrize("command", LONG_RUNNING)
def test_every_long_running_command_takes_the_same_outage_option(command: str) -> None:
    parser = build_parser()
    args = parser.parse_args(_minimal(command))
    assert args.outage_timeout == OUTAGE_SECONDS == DEFAULT_OUTAGE_SECONDS
    again = parser.parse_args([*_minimal(command), "--outage-timeout", "7.5"])
    assert again.outage_timeout == 7.5


def test_a_negative_outage_timeout_is_one_line() -> None:
    from babelq.cli.commands import outage_policy

    args = build_parser().parse_args([*_minimal("relay"), "--outage-timeout", "-1"])
    with pytest.raises(ConfigurationError, match=r"^--outage-timeout: must be 0 seconds or more, got -1$"):
        outage_policy(args)


def _minimal(command: str) -> list[str]:
    return {
        "settle": ["settle", "--ledger", "l.db", "--checkpoint", "ck"],
        "consume": ["consume", "--app", "m:p", "--sink", "sqlite:///s.db", "--checkpoint", "ck"],
        "relay": ["relay"],
        "worker": ["worker", "--app", "m:app"],
    }[command]


@pytest.mark.parametrize("command", [
    ("worker", "--app", "babelq.runtime:App", "--queue", "q"),
    ("relay", "--outbox", "sqlite:///{tmp}/outbox.db"),
])
def test_a_broker_down_longer_than_the_bound_stops_the_command_in_one_line(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    """A long-running command started while its broker is down waits, then stops in one line
    naming the option once ``--outage-timeout`` has passed (port 1: nothing listens there)."""
    args = [part.format(tmp=tmp_path) for part in command]
    proc = subprocess.run(
        [str(BABELQ), *args, "--broker", "redis://:s3cret@127.0.0.1:1/15", "--outage-timeout", "1"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
        env=isolated_env(("BABELQ_BROKER",)),
    )
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2, proc.stderr
    said = f"babelq {command[0]}: error: broker redis://:***@127.0.0.1:1/15 unavailable for more than 1 s "
    assert last.startswith(said + "(--outage-timeout): "), proc.stderr
    assert [line for line in proc.stderr.splitlines() if ": error: " in line] == [last]
    assert "Traceback" not in proc.stderr and "s3cret" not in proc.stderr

"""How babelq.cli.main finds command modules: missing ones skipped, broken ones explained."""

from __future__ import annotations

from pathlib import Path

import pytest

import babelq.cli.commands as commands_package
from babelq.cli import main as cli_main

NEEDS_SPARK = '''
raise ModuleNotFoundError("No module named 'pyspark'", name="pyspark")
'''

NEEDS_REDIS_AT_RUN = '''
def register(subparsers):
    parser = subparsers.add_parser("needsredis", help="needs redis when it runs")
    parser.set_defaults(func=run)

def run(args):
    raise ModuleNotFoundError("No module named 'redis'", name="redis")
'''

BROKEN_REGISTER = '''
def register(subparsers):
    raise RuntimeError("bug in register")
'''


@pytest.fixture
def extra_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Real command modules in a temporary directory added to babelq.cli.commands' search path."""
    (tmp_path / "needsspark.py").write_text(NEEDS_SPARK)
    (tmp_path / "needsredis.py").write_text(NEEDS_REDIS_AT_RUN)
    (tmp_path / "brokenreg.py").write_text(BROKEN_REGISTER)
    monkeypatch.setattr(commands_package, "__path__", [*commands_package.__path__, str(tmp_path)])
    monkeypatch.setattr(
        cli_main, "COMMANDS", ("encode", "doesnotexist", "needsspark", "needsredis", "brokenreg")
    )
    return tmp_path


def test_missing_modules_are_skipped_and_broken_ones_still_listed(
    extra_commands: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = cli_main.build_parser()
    text = " ".join(parser.format_help().split())
    assert "doesnotexist" not in text
    assert "needsspark" in text and "pip install 'babelq[spark]'" in text
    assert "brokenreg" in text and "failed to register" in text
    assert "encode" in text


def test_a_command_missing_its_extra_fails_with_an_install_hint(
    extra_commands: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main.main(["needsspark", "--anything", "goes"]) == 2
    assert "pip install 'babelq[spark]'" in capsys.readouterr().err


def test_a_missing_dependency_at_run_time_gives_the_hint(
    extra_commands: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main.main(["needsredis"]) == 2
    assert "pip install 'babelq[redis]'" in capsys.readouterr().err


def test_missing_extra_maps_only_optional_dependencies() -> None:
    assert cli_main.missing_extra(ModuleNotFoundError(name="pyspark.sql")) is not None
    assert cli_main.missing_extra(ModuleNotFoundError(name="psycopg")) is not None
    assert cli_main.missing_extra(ModuleNotFoundError(name="somethingelse")) is None

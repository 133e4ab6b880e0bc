"""Every option of every ``babelq`` command: help text, defaults shown, one name for the broker.

The parsers are walked as :func:`babelq.cli.main.build_parser` builds them (nested ones too,
``outbox init`` ...), and each check reads what ``--help`` prints, so a command added later is
checked without being listed here. In-process and fast: nothing below starts Spark or a broker
except the one conformance run against an unopenable ``$BABELQ_BROKER``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

import pytest

from babelq.cli import main as cli_main
from babelq.cli.commands import BROKER_ENV, BROKER_OPTION, OLD_BROKER_OPTIONS
from babelq.cli.help_format import shows_value_default, subparsers_of
from conftest import CONFORMANCE_DIR

#: Commands that talk to a broker, and the hidden spelling each one had before ``--broker``.
BROKER_COMMANDS = {
    "conformance": ("--transport",),
    "worker": ("--url",),
    "demo": (),
    "expire": (),
    "ingest": (),
    "publish": (),
    "settle": (),
    "consume": (),
    "dlq": (),
    "relay": (),
}

#: The least each broker command needs to parse (its required arguments).
REQUIRED_ARGS = {
    "conformance": ["suite"],
    "worker": ["--app", "m:a"],
    "demo": [],
    "ingest": ["f.csv", "--rejects", "r"],
    "publish": ["f.csv", "--urn", "urn:babel:orders:created", "--rejects", "r"],
    "settle": ["--ledger", "l.db", "--checkpoint", "c"],
    "consume": ["--app", "m:a", "--sink", "s.db", "--checkpoint", "c"],
    "dlq": ["--queue", "q.dlq"],
    "expire": ["--queue", "q"],
    "relay": [],
}


def parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(``babelq <command> [<action>]``, parser) for the top level and every parser below it."""

    def walk(name: str, parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
        yield name, parser
        for sub in subparsers_of(parser):
            yield from walk(sub.prog, sub)

    yield from walk("babelq", cli_main.build_parser())


ALL = list(parsers())
IDS = [name for name, _ in ALL]


def shown_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments ``--help`` lists (not the subcommand choosers, which list their commands)."""
    return [
        a
        for a in parser._actions
        if a.help is not argparse.SUPPRESS and not isinstance(a, argparse._SubParsersAction)
    ]


def help_line(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """What ``--help`` prints for ``action``, on one line."""
    formatter = parser.formatter_class(parser.prog, width=10_000)  # wide: no line breaks in words
    formatter.add_argument(action)
    return " ".join(formatter.format_help().split())


def command_parser(command: str) -> argparse.ArgumentParser:
    for name, parser in ALL:
        if name == f"babelq {command}":
            return parser
    raise AssertionError(f"no parser for babelq {command}")


def test_every_command_is_available() -> None:
    names = {name.split()[1] for name, _ in ALL if name != "babelq"}
    assert names >= set(cli_main.COMMANDS)
    for name, parser in ALL:
        assert not (parser.description or "").startswith("unavailable"), f"{name}: {parser.description}"


@pytest.mark.parametrize(("name", "parser"), ALL, ids=IDS)
def test_every_argument_has_help(name: str, parser: argparse.ArgumentParser) -> None:
    for action in shown_actions(parser):
        assert (action.help or "").strip(), (
            f"{name} {'/'.join(action.option_strings) or action.dest}: no help"
        )


@pytest.mark.parametrize(("name", "parser"), ALL, ids=IDS)
def test_every_default_is_shown(name: str, parser: argparse.ArgumentParser) -> None:
    checked = 0
    for action in shown_actions(parser):
        line = help_line(parser, action)
        label = f"{name} {'/'.join(action.option_strings) or action.dest}"
        if shows_value_default(action):
            assert f"(default: {action.default})" in line, (
                f"{label}: default {action.default!r} not shown: {line}"
            )
            checked += 1
        assert "(default: None)" not in line and "(default: False)" not in line, f"{label}: {line}"
        assert line.count("(default") <= 1, f"{label}: default stated twice: {line}"
    if name in ("babelq settle", "babelq ingest"):
        assert checked >= 4  # --max-attempts, --retry-delay-ms, --rejects-format ... are among them


def test_the_defaults_named_in_the_issue_are_shown() -> None:
    def line(command: str, option: str) -> str:
        parser = command_parser(command)
        (action,) = [a for a in parser._actions if option in a.option_strings]
        return help_line(parser, action)

    assert line("settle", "--max-attempts").endswith("before it is dead-lettered (default: 3)")
    assert line("settle", "--retry-delay-ms").endswith("in ms (default: 1000)")
    assert line("ingest", "--rejects-format").endswith("file format of --rejects (default: parquet)")


@pytest.mark.parametrize(("name", "parser"), ALL, ids=IDS)
def test_the_broker_is_spelled_broker_everywhere(name: str, parser: argparse.ArgumentParser) -> None:
    text = parser.format_help()
    for old in OLD_BROKER_OPTIONS:
        assert not re.search(rf"(?<![\w-]){re.escape(old)}\b", text), f"{name} --help shows {old}"
    brokers = [a for a in parser._actions if a.dest == "broker"]
    command = name.split()[1] if name != "babelq" else ""
    if command not in BROKER_COMMANDS or name.count(" ") > 1:
        assert not brokers, f"{name} has a broker option but is not in BROKER_COMMANDS"
        return
    visible = [a for a in brokers if a.help is not argparse.SUPPRESS]
    hidden = [a for a in brokers if a.help is argparse.SUPPRESS]
    assert [a.option_strings for a in visible] == [[BROKER_OPTION]]
    assert sorted(s for a in hidden for s in a.option_strings) == sorted(BROKER_COMMANDS[command])
    assert f"{BROKER_OPTION} URL" in text and f"${BROKER_ENV}" in text
    # no other option takes a broker under another name
    for action in shown_actions(parser):
        for option in action.option_strings:
            assert option not in ("--url", "--transport", "--broker-url"), f"{name}: {option}"


@pytest.mark.parametrize("command", sorted(BROKER_COMMANDS))
def test_broker_and_its_old_spellings_parse_to_the_same_value(command: str) -> None:
    parser = cli_main.build_parser()
    url = "redis://127.0.0.1:6379/15"
    for option in (BROKER_OPTION, *BROKER_COMMANDS[command]):
        args = parser.parse_args([command, *REQUIRED_ARGS[command], option, url])
        assert args.broker == url, option
    args = parser.parse_args([command, *REQUIRED_ARGS[command]])
    assert args.broker is None  # then $BABELQ_BROKER (see babelq.cli.commands.broker_url)


def test_the_last_spelling_given_wins() -> None:
    parser = cli_main.build_parser()
    args = parser.parse_args(["worker", "--app", "m:a", "--url", "memory://a", "--broker", "memory://b"])
    assert args.broker == "memory://b"


@pytest.mark.parametrize("name", IDS)
def test_help_runs_for_every_command(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = name.split()[1:]
    with pytest.raises(SystemExit) as exit_:
        cli_main.main([*argv, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {name}"), out[:200]
    if len(argv) == 1 and argv[0] in BROKER_COMMANDS:
        assert "--broker URL" in out


def test_conformance_takes_its_broker_from_BABELQ_BROKER(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the URL is opened before the suite runs, so an unopenable one is a usage error naming it
    monkeypatch.setenv(BROKER_ENV, "sqlite:///proc/q.db")
    assert cli_main.main(["conformance", str(CONFORMANCE_DIR)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("babelq conformance: error:") and "/proc/q.db" in err
    # --broker wins over the environment
    assert cli_main.main(["conformance", str(CONFORMANCE_DIR), "--broker", "memory://"]) == 0


@pytest.mark.parametrize("name", IDS)
def test_a_wrong_flag_prints_that_commands_usage_line_and_one_error_line(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli_main.main([*name.split()[1:], "--no-such-flag"])
    assert exit_.value.code == 2
    usage, error = capsys.readouterr().err.splitlines()  # two lines, whatever the command's options
    assert usage.startswith(f"usage: {name} ") and usage.endswith(f"({name} -h lists the options)"), usage
    assert error.startswith(f"{name}: error: "), error


@pytest.mark.parametrize("name", [name for name in IDS if name != "babelq"])
def test_every_command_takes_the_logging_options_after_its_name(name: str) -> None:
    import logging

    parser = cli_main.build_parser()
    argv = name.split()[1:]
    required = REQUIRED_ARGS.get(argv[0], []) if len(argv) == 1 else []
    required += {"babelq encode": ["urn:babel:a:b", "{}"], "babelq outbox": ["init"],
                 "babelq outbox prune": ["--older-than", "1"], "babelq schema": ["compat", "a", "b"],
                 "babelq schema compat": ["a", "b"]}.get(name, [])
    for before, after, level in [
        ([], ["-v"], logging.INFO),
        (["-v"], ["-v"], logging.DEBUG),
        ([], ["--log-level", "error"], logging.ERROR),
        (["--log-level", "debug"], ["--log-level", "error"], logging.ERROR),  # the one after the name wins
    ]:
        args, unknown = parser.parse_known_args([*before, *argv, *after, *required])
        assert unknown == [], (name, after)
        args.verbose = cli_main.verbosity(args)
        assert cli_main.log_level(args) == level, (name, before, after)

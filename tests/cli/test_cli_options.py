"""Every option of every ``babelq`` command: help text, defaults shown, one name for the broker,
one meaning per option name, durations in seconds, no word that is both an action and a flag.

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

#: The least each broker command needs to parse (its required arguments; for a command with
#: actions, one of them).
REQUIRED_ARGS = {
    "conformance": ["suite"],
    "worker": ["--app", "m:a"],
    "demo": [],
    "ingest": ["f.csv", "--rejects", "r"],
    "publish": ["f.csv", "--urn", "urn:babel:orders:created", "--rejects", "r"],
    "settle": ["--ledger", "l.db", "--checkpoint", "c"],
    "consume": ["--app", "m:a", "--sink", "s.db", "--checkpoint", "c"],
    "dlq": ["triage", "--queue", "q.dlq"],
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
        assert checked >= 4  # --max-attempts, --retry-delay, --rejects-format ... are among them


def test_the_defaults_named_in_the_issue_are_shown() -> None:
    def line(command: str, option: str) -> str:
        parser = command_parser(command)
        (action,) = [a for a in parser._actions if option in a.option_strings]
        return help_line(parser, action)

    assert line("settle", "--max-attempts").endswith("before it is dead-lettered (default: 3)")
    assert line("settle", "--retry-delay").endswith("jittered backoff (default: 1.0)")
    assert line("ingest", "--rejects-format").endswith("file format of --rejects (default: parquet)")


@pytest.mark.parametrize(("name", "parser"), ALL, ids=IDS)
def test_the_broker_is_spelled_broker_everywhere(name: str, parser: argparse.ArgumentParser) -> None:
    text = parser.format_help()
    for old in OLD_BROKER_OPTIONS:
        assert not re.search(rf"(?<![\w-]){re.escape(old)}\b", text), f"{name} --help shows {old}"
    brokers = [a for a in parser._actions if a.dest == "broker"]
    command = name.split()[1] if name != "babelq" else ""
    if command not in BROKER_COMMANDS:
        assert not brokers, f"{name} has a broker option but is not in BROKER_COMMANDS"
        return
    if subparsers_of(parser):  # `babelq dlq`: its actions show --broker (it keeps a hidden one)
        assert all(a.help is argparse.SUPPRESS for a in brokers), name
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
    if argv and argv[0] in BROKER_COMMANDS and not subparsers_of(command_parser(" ".join(argv))):
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


#: Every option name a command shows and its one meaning, as words each help text of it contains:
#: a command that needs another meaning takes another name (``--micro-batch`` against
#: ``--publish-batch``), and a new option starts here.
OPTION_MEANINGS = {
    "--all": "list every check",
    "--app": "a dotted module or a .py file, and its attribute",
    "--array": "json array",
    "--bank": "core banking",
    "--batch-id": "the batch's id, meta.correlation_id of every envelope",
    "--brief": "leave out the pretty-printed document",
    "--broker": "broker url",
    "--cause": "select by dead_letter.cause",
    "--checkpoint": "spark checkpoint directory",
    "--concurrency": "handler threads",
    "--conf": "a spark setting",
    "--correlation-id": "meta.correlation_id",
    "--doc-version": "info.version",
    "--dry-run": "write nothing",
    "--every": "sweep again every",
    "--expire-every": "dead-letter the queue's expired messages",
    "--export": "a picture of report.html",
    "--failed": "failed rows",
    "--format": "the file's format",
    "--grace-period": "in-flight handlers get on shutdown",
    "--help": "show this help message",
    "--id": "select by meta.id",
    "--id-column": "meta.id",
    "--journal": "the batch journal",
    "--json": "json",
    "--lease": "claim lasts",
    "--ledger": "ledger",
    "--limit": "at most n",
    "--log-format": "log line format",
    "--log-level": "the level of log lines",
    "--mask": "masked",
    "--master": "spark master",
    "--max-attempts": "attempts of a failing message",
    "--max-messages": "stop after processing",
    "--metrics-port": "serve prometheus metrics on this port",
    "--micro-batch": "max messages per micro-batch",
    "--outage-timeout": "wait out an unreachable broker, ledger, sink or store",
    "--mode": "backward",
    "--no-mark": "do not mark the messages as replays",
    "--older-than": "age of the oldest published row",
    "--once": "then exit",
    "--out": "working directory",
    "--outbox": "outbox",
    "--outbox-table": "outbox table",
    "--output": "write it here",
    "--pattern": "personal field",
    "--poll": "between polls",
    "--prefetch": "messages reserved at once",
    "--priority": "meta.priority",
    "--progress": "progress",
    "--publish-batch": "outbox rows claimed and published at a time",
    "--queue": "queue",
    "--reason": "select by dead_letter.reason",
    "--registry": "registry.json manifest",
    "--rejects": "rejected rows",
    "--rejects-format": "file format of --rejects",
    "--republish": "publish a batch the journal says is finished again",
    "--require": "x-gdpr-sensitive",
    "--required": "has no schema fails",
    "--retry-delay": "base delay of a retry's jittered backoff",
    "--rows": "payments in the file",
    "--schema": "json schema",
    "--seed": "generator seed",
    "--sharding-key": "meta.sharding_key",
    "--sink": "where the handlers write",
    "--strict": "refuse a badly formed urn",
    "--table": "outbox table",
    "--timeout": "stop after",
    "--title": "info.title",
    "--to": "into queue instead of each original queue",
    "--trace-id": "trace",
    "--trigger": "a micro-batch every seconds",
    "--ttl": "meta.ttl of every envelope",
    "--until-drained": "stop once nothing is waiting",
    "--until-empty": "stop when the queue is empty",
    "--urn": "urn",
    "--verbose": "log more",
    "--version": "version",
    "--visibility-timeout": "lease of the messages a micro-batch holds",
    "-h": "show this help message",
    "-o": "write it here",
    "-v": "log more",
}

#: Words in an option's name that make it a duration.
DURATION_WORDS = ("timeout", "delay", "every", "poll", "lease", "period", "ttl", "older", "trigger",
                  "interval", "wait", "age", "after")
#: A duration option's value is SECONDS, unless its name ends in the unit it takes.
UNIT_SUFFIXES = ("-ms", "-seconds", "-minutes", "-hours")
#: Words in a help text that make the option a duration whatever its name.
DURATION_HELP = re.compile(r"\b(seconds?|ms|milliseconds?|minutes?|hours?)\b")


def shown_options() -> Iterator[tuple[str, argparse.Action, str]]:
    """(parser name, action, option string) for every option ``--help`` lists, in every parser."""
    for name, parser in ALL:
        for action in shown_actions(parser):
            for option in action.option_strings:
                yield name, action, option


def test_every_option_name_has_one_meaning_across_commands() -> None:
    kinds: dict[str, set[tuple[str, str, object]]] = {}
    for name, action, option in shown_options():
        assert option in OPTION_MEANINGS, f"{name} {option}: not in OPTION_MEANINGS (give it its one meaning)"
        text = " ".join((action.help or "").split()).lower()
        assert OPTION_MEANINGS[option] in text, (
            f"{name} {option}: help {action.help!r} does not say {OPTION_MEANINGS[option]!r}, its meaning in "
            "the other commands; give this one another name"
        )
        kind = (type(action).__name__, getattr(action.type, "__name__", str(action.type)), action.nargs)
        kinds.setdefault(option, set()).add(kind)
    for option, seen in kinds.items():
        assert len(seen) == 1, f"{option}: parsed differently by different commands: {seen}"
    assert set(OPTION_MEANINGS) == set(kinds), f"stale rows: {set(OPTION_MEANINGS) - set(kinds)}"


def is_duration(action: argparse.Action, option: str) -> bool:
    words = option.lstrip("-").split("-")
    named = any(word.startswith(d) for word in words for d in DURATION_WORDS)
    return named or bool(DURATION_HELP.search(" ".join((action.help or "").split())))


def test_every_duration_is_in_seconds_or_names_its_unit() -> None:
    durations = 0
    for name, action, option in shown_options():
        if action.nargs == 0 or not option.startswith("--") or not is_duration(action, option):
            continue
        durations += 1
        if option.endswith(UNIT_SUFFIXES):
            continue
        assert action.metavar == "SECONDS", f"{name} {option}: a duration shown as {action.metavar!r}"
        assert action.type in (float, int), f"{name} {option}: {action.type} is not a number of seconds"
        assert not re.search(r"\b(ms|milliseconds?|minutes?|hours?)\b", action.help or ""), (
            f"{name} {option}: SECONDS but the help names another unit: {action.help}"
        )
    assert durations >= 10  # --timeout, --visibility-timeout, --retry-delay, --ttl, --lease, --poll ...


@pytest.mark.parametrize(("name", "parser"), [(n, p) for n, p in ALL if n != "babelq"],
                         ids=[n for n in IDS if n != "babelq"])
def test_no_action_is_both_a_positional_word_and_a_flag(name: str, parser: argparse.ArgumentParser) -> None:
    # `babelq dlq redrive` and `babelq dlq --redrive` both meant one thing; a command says it one way
    words: set[str] = set()
    for action in parser._actions:
        if action.option_strings or action.help is argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._SubParsersAction):
            words |= set(action.choices)
        elif action.choices is not None:
            words |= {str(choice) for choice in action.choices}
    flags = {option.lstrip("-") for action in shown_actions(parser) for option in action.option_strings}
    for sub in subparsers_of(parser):
        flags |= {option.lstrip("-") for action in shown_actions(sub) for option in action.option_strings}
    assert not words & flags, f"{name}: {sorted(words & flags)} is both a positional word and a flag"


#: A former spelling of an option, a command using it, and the option it now means.
DEPRECATED = [
    ("settle", ["--batch", "40"], "micro_batch", 40),
    ("consume", ["--batch", "40"], "micro_batch", 40),
    ("demo", ["--batch", "40"], "micro_batch", 40),
    ("relay", ["--batch", "40"], "publish_batch", 40),
    ("settle", ["--retry-delay-ms", "250"], "retry_delay", 0.25),
    ("dlq", ["--queue", "q", "--redrive"], "action", "redrive"),
]
NEW_SPELLING = {"micro_batch": "--micro-batch", "publish_batch": "--publish-batch",
                "retry_delay": "--retry-delay", "action": "babelq dlq redrive"}


@pytest.mark.parametrize(("command", "given", "dest", "value"), DEPRECATED,
                         ids=[f"{c} {g[-2] if g[-1].isdigit() else g[-1]}" for c, g, _, _ in DEPRECATED])
def test_a_former_spelling_still_parses_is_hidden_and_warns_in_one_line(
    command: str, given: list[str], dest: str, value: object, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = cli_main.build_parser()
    required = [a for a in REQUIRED_ARGS[command] if command != "dlq"]
    args = parser.parse_args([command, *required, *given])
    assert getattr(args, dest) == value
    old = next(word for word in given if word.startswith("--") and word != "--queue")
    assert capsys.readouterr().err == (
        f"babelq {command}: warning: {old} is deprecated; use {NEW_SPELLING[dest]}\n"
    )
    assert not re.search(rf"{re.escape(old)}\b(?!-)", command_parser(command).format_help())
    # the new spelling parses into the same value, silently
    if dest != "action":
        new = [NEW_SPELLING[dest], given[-1] if dest != "retry_delay" else "0.25"]
        assert getattr(parser.parse_args([command, *required, *new]), dest) == value
        assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["dlq", "--queue", "q"],  # the form before the actions: triage
        ["dlq", "triage", "--queue", "q"],
        ["dlq", "--queue", "q", "triage"],
    ],
)
def test_dlq_triage_in_every_form(argv: list[str]) -> None:
    args = cli_main.build_parser().parse_args(argv)
    assert (args.action or "triage", args.queue, args.to, args.dry_run) == ("triage", "q", None, False)


@pytest.mark.parametrize(
    "argv",
    [
        ["dlq", "redrive", "--queue", "q", "--to", "s", "--id", "a", "--id", "b", "--broker", "memory://"],
        ["dlq", "--broker", "memory://", "--queue", "q", "redrive", "--to", "s", "--id", "a", "--id", "b"],
        ["dlq", "--queue", "q", "--to", "s", "--id", "a", "--id", "b", "--broker", "memory://", "--redrive"],
    ],
)
def test_dlq_redrive_in_every_form(argv: list[str]) -> None:
    args = cli_main.build_parser().parse_args(argv)
    assert (args.action, args.queue, args.to, args.ids, args.broker) == ("redrive", "q", "s", ["a", "b"], "memory://")


def test_dlq_triage_refuses_a_redrive_option_and_a_missing_queue(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli_main.main(["dlq", "triage", "--queue", "q", "--to", "s"])
    last = capsys.readouterr().err.splitlines()[-1]
    assert last == "babelq dlq triage: error: unrecognized arguments: --to s"
    assert cli_main.main(["dlq", "redrive", "--broker", "memory://"]) == 2
    assert capsys.readouterr().err == (
        "babelq dlq: error: --queue: required (babelq dlq triage|redrive --queue QUEUE)\n"
    )

"""Every fenced code block of README.md and docs/*.md runs, or is checked, as the page shows it.

One test per block, named ``<file>:<line of the opening fence>:<language>``:

* ``python``: executed in a fresh interpreter (this one, the project's venv) in a scratch
  directory, as ``__main__``; a traceback points at the page's own line.
* ``sh``, ``bash``, ``shell``, ``console``: run by ``bash -e -o pipefail`` in a scratch directory
  whose PATH starts with the venv's ``bin`` (``babelq`` and ``python`` are the project's). A block
  whose lines start with ``$ `` is a transcript: each ``$`` command runs on its own (stdout and
  stderr together) and the lines under it must appear in its output, in order (``…`` or ``...``
  matches anything); a command shown without output must exit 0, one shown with output need not
  when that output is an error line. The scratch directory links the repository's ``examples``,
  ``tests`` and ``bench`` (and ``.venv``), so commands written for the repository root work there
  and write nothing into it. ``pip install`` runs with ``PIP_NO_INDEX=1``: it passes when the
  extra is installed here and names a real extra, and never downloads.
* ``json``: parses; an object with ``job`` (or ``urn``) and ``meta`` is an envelope, and
  ``babelq.decode`` must accept it.
* ``text`` and blocks without a language are output, diagrams or synopses (``sql`` and
  ``markdown`` shown for reference too, and ``mermaid`` diagrams, which GitHub draws): not
  run, unless a marker says they are the output of the block above (below). Their
  ``babelq ...`` command lines are checked against the CLI's parsers: an option the
  command lacks, or an old spelling ``--help`` no longer shows, fails (run blocks get the
  same check, which catches the old spellings that still work).

Every block starts with an environment without ``BABELQ_*`` settings (but ``BABELQ_CHROMIUM``),
so a ``$BABELQ_BROKER`` of the person running the tests cannot change a block.

Markers: an HTML comment (invisible on the rendered page) on the line(s) right above the opening
fence, ``<!-- docs-test: DIRECTIVE; DIRECTIVE -->``:

``skip (REASON)``
    not run: the block cannot run here by nature (an Azure namespace, a Spark cluster of several
    hosts, the network). The test is skipped with the reason; ``test_skips_are_few_and_explained``
    lists them and keeps their number small.
``sequence NAME``
    the blocks of one page with the same NAME run in order in one process, as one program
    (Python blocks share their globals; every block shares the scratch directory and, for
    Python, ``os.environ``). A failing block stops the sequence; the blocks after it fail as
    "not reached".
``needs SERVICE[, SERVICE]``
    ``redis``, ``rabbitmq``, ``postgres`` (``conftest.require_service``: skipped loudly here, a
    failure in CI). A block naming ``redis://``, ``amqp://``/``artemis://`` or ``postgresql://``
    on 127.0.0.1 or localhost needs that service without a marker.
``env NAME=VALUE``
    an environment variable the page says the block runs with (``PYTHONPATH=tests`` for the
    examples that use the test suite's fakes of the Kafka and Service Bus clients).
``timeout SECONDS``
    the block's (or sequence's) time limit; 60 s by default, 240 s with ``spark``.
``spark``
    the block (or sequence) starts Spark: the test is marked ``spark`` and ``slow`` and its
    process gets the longer time limit. Put a page's Spark blocks in one sequence: each process
    starts its own JVM (10-20 s).
``stop after TEXT``
    a Python block that runs until signalled (``app.run()``): once its output contains TEXT, the
    test sends SIGTERM, and the block must then end on its own without an error (what the page
    promises of a graceful stop).
``output``
    on a ``text`` block (or one without a language): it is the stdout of the nearest runnable
    block above it on the page, whose output must contain its lines in order (``…`` matches
    anything).

The Spark blocks run in their own processes; the ``spark`` marker puts this module in the
conftest scheduler's unit of Spark modules that start processes of their own, so one xdist worker
runs them one after another (never two of their JVMs at once).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, require_service

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

PYTHON = frozenset({"python", "py"})
SHELL = frozenset({"sh", "bash", "shell", "console"})
JSON = frozenset({"json"})
#: not run: output, diagrams (Mermaid ones too), synopses, and SQL or Markdown shown for reference
TEXT = frozenset({"", "text", "markdown", "sql", "mermaid"})
SERVICES = ("redis", "rabbitmq", "postgres")
#: what the scratch directory links from the repository root
LINKED = ("examples", "tests", "bench", ".venv")
DEFAULT_TIMEOUT = 60.0
SPARK_TIMEOUT = 240.0
#: at most this many blocks may be skipped (each with its reason in the page)
MAX_SKIPS = 10

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_MARKER = re.compile(r"^\s*<!--\s*docs-test:(?P<body>.*?)-->\s*$")
_LOCAL_URL = {
    "redis": re.compile(r"redis://[^\s\"']*?(127\.0\.0\.1|localhost)"),
    "rabbitmq": re.compile(r"(amqp|artemis)://[^\s\"']*?(127\.0\.0\.1|localhost)"),
    "postgres": re.compile(r"postgresql://[^\s\"']*?(127\.0\.0\.1|localhost)"),
}
#: a ``babelq`` command line (not one of its error lines, ``babelq worker: error: ...``)
_COMMAND_LINE = re.compile(r"babelq (?![\w-]*:)")
_SENTINEL = "\x1edocs-test-step:"


@dataclass
class Block:
    """One fenced block of a page, with the markers right above it."""

    doc: str  # path relative to the repository root
    line: int  # line of the opening fence (1-based)
    lang: str
    source: str
    skip: str | None = None
    sequence: str | None = None
    needs: set[str] = field(default_factory=set)
    env: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None
    spark: bool = False
    stop_after: str | None = None
    output: bool = False

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}:{self.lang or 'text'}"

    @property
    def transcript(self) -> bool:
        return self.lang in SHELL and any(line.startswith("$ ") for line in self.source.splitlines())

    @property
    def kind(self) -> str:
        if self.lang in PYTHON:
            return "python"
        if self.lang in SHELL:
            return "console" if self.transcript else "shell"
        if self.lang in JSON:
            return "json"
        if self.lang in TEXT:
            return "output" if self.output else "text"
        return "unknown"

    @property
    def runs(self) -> bool:
        return self.kind in ("python", "shell", "console")


class MarkerError(ValueError):
    pass


def _apply(block: Block, directive: str) -> None:
    word, _, rest = directive.strip().partition(" ")
    rest = rest.strip()
    if word == "skip":
        reason = re.fullmatch(r"\((.+)\)", rest)
        if reason is None or not reason.group(1).strip():
            raise MarkerError(f"skip needs a reason in parentheses: {directive!r}")
        block.skip = reason.group(1).strip()
    elif word == "sequence" and re.fullmatch(r"[\w.-]+", rest):
        block.sequence = rest
    elif word == "needs":
        names = {n.strip() for n in rest.split(",")}
        if not names <= set(SERVICES):
            raise MarkerError(f"needs takes {', '.join(SERVICES)}: {directive!r}")
        block.needs |= names
    elif word == "env" and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", rest):
        name, _, value = rest.partition("=")
        block.env[name] = value
    elif word == "timeout" and re.fullmatch(r"\d+", rest):
        block.timeout = float(rest)
    elif word == "spark" and not rest:
        block.spark = True
    elif word == "stop" and rest.startswith("after ") and rest[6:].strip():
        block.stop_after = rest[6:].strip()
    elif word == "output" and not rest:
        block.output = True
    else:
        raise MarkerError(f"unknown docs-test directive {directive!r}")


def parse(path: Path, root: Path = ROOT) -> list[Block]:
    """The fenced blocks of one page; a marker that is malformed or not right above a fence raises."""
    doc = str(path.relative_to(root))
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    pending: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        marker = _MARKER.match(lines[i])
        if marker:
            pending.append((i + 1, marker.group("body")))
            i += 1
            continue
        opening = _FENCE.match(lines[i])
        if opening is None:
            if pending:
                raise MarkerError(f"{doc}:{pending[0][0]}: a docs-test marker must be right above a fence")
            i += 1
            continue
        fence = opening.group("fence")
        end = i + 1
        while end < len(lines) and not re.fullmatch(
            rf" {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*", lines[end]
        ):
            end += 1
        if end == len(lines):
            raise MarkerError(f"{doc}:{i + 1}: the fence is never closed")
        indent = len(opening.group("indent"))
        body = [re.sub(rf"^ {{0,{indent}}}", "", line) for line in lines[i + 1 : end]]
        block = Block(doc, i + 1, opening.group("info").split()[0] if opening.group("info").split() else "",
                      "\n".join(body) + "\n")
        for at, text in pending:
            for directive in re.split(r";(?![^()]*\))", text):  # not a ; inside a skip's reason
                try:
                    _apply(block, directive)
                except MarkerError as exc:
                    raise MarkerError(f"{doc}:{at}: {exc}") from None
        pending = []
        blocks.append(block)
        i = end + 1
    if pending:
        raise MarkerError(f"{doc}:{pending[0][0]}: a docs-test marker must be right above a fence")
    return blocks


@dataclass
class Unit:
    """What one process runs: one block, or a page's sequence."""

    name: str
    blocks: list[Block]

    @property
    def spark(self) -> bool:
        return any(b.spark for b in self.blocks)

    @property
    def timeout(self) -> float:
        given = [b.timeout for b in self.blocks if b.timeout is not None]
        return max(given) if given else (SPARK_TIMEOUT if self.spark else DEFAULT_TIMEOUT)

    @property
    def needs(self) -> set[str]:
        found: set[str] = set()
        for b in self.blocks:
            found |= b.needs | {name for name, url in _LOCAL_URL.items() if url.search(b.source)}
        return found

    @property
    def env(self) -> dict[str, str]:
        merged: dict[str, str] = {}
        for b in self.blocks:
            merged.update(b.env)
        return merged


def collect() -> tuple[list[Block], dict[str, Unit]]:
    """Every block of every page, and the unit each runnable block runs in (by ``where``)."""
    blocks = [b for path in DOCS for b in parse(path)]
    units: dict[str, Unit] = {}
    sequences: dict[tuple[str, str], Unit] = {}
    for b in blocks:
        if not b.runs or b.skip:
            continue
        if b.sequence is None:
            units[b.where] = Unit(b.where, [b])
            continue
        key = (b.doc, b.sequence)
        if key not in sequences:
            sequences[key] = Unit(f"{b.doc} sequence {b.sequence}", [])
        sequences[key].blocks.append(b)
        units[b.where] = sequences[key]
    return blocks, units


BLOCKS, UNITS = collect()
BY_WHERE = {b.where: b for b in BLOCKS}


def _ran_before(block: Block) -> Block | None:
    """The nearest runnable block above ``block`` on its page (what an ``output`` block shows)."""
    found = None
    for b in BLOCKS:
        if b.doc == block.doc and b.line < block.line and b.runs:
            found = b
    return found


# --- running ----------------------------------------------------------------------------------

#: executed by ``python -c`` in the scratch directory: runs the plan's steps in order, writing
#: each step's result to the results file as soon as it is known
RUNNER = r"""
import json, subprocess, sys, traceback

plan_path, results_path, sentinel = sys.argv[1:4]
with open(plan_path, encoding="utf-8") as f:
    plan = json.load(f)
results = []
namespace = {"__name__": "__main__", "__builtins__": __builtins__}


def save():
    with open(results_path, "w", encoding="utf-8") as f:
        json.dump(results, f)


def transcript(source):
    commands = []
    for line in source.splitlines():
        if line.startswith("$ "):
            commands.append({"command": line[2:], "expected": []})
        elif commands and commands[-1]["command"].endswith("\\"):
            commands[-1]["command"] += "\n" + line
        elif commands and line.strip():
            commands[-1]["expected"].append(line)
    return commands


for index, step in enumerate(plan):
    for stream in (sys.stdout, sys.stderr):
        stream.write("\n%s%d\n" % (sentinel, index))
        stream.flush()
    result = {"status": "ok", "commands": []}
    if step["kind"] == "python":
        try:
            exec(compile("\n" * step["line"] + step["source"], step["path"], "exec"), namespace)
        except SystemExit as exc:
            if exc.code not in (None, 0):
                result["status"] = "SystemExit(%r)" % (exc.code,)
        except BaseException as exc:
            traceback.print_exc()
            result["status"] = "%s: %s" % (type(exc).__name__, exc)
        sys.stdout.flush()
        sys.stderr.flush()
    elif step["kind"] == "shell":
        code = subprocess.call(["bash", "-e", "-o", "pipefail", "-c", step["source"]])
        if code:
            result["status"] = "bash exited %d" % code
    else:
        for command in transcript(step["source"]):
            done = subprocess.run(["bash", "-o", "pipefail", "-c", command["command"]],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            sys.stdout.write(done.stdout)
            sys.stdout.flush()
            result["commands"].append(dict(command, output=done.stdout, code=done.returncode))
    results.append(result)
    save()
    if result["status"] != "ok":
        break
"""


@dataclass
class Run:
    """What one unit's process did: per step, its result and its share of stdout and stderr."""

    results: list[dict[str, Any]]
    stdout: list[str]
    stderr: list[str]
    problem: str | None  # a timeout or a crash of the runner itself

    def step(self, index: int) -> tuple[dict[str, Any] | None, str, str]:
        out = self.stdout[index] if index < len(self.stdout) else ""
        err = self.stderr[index] if index < len(self.stderr) else ""
        return (self.results[index] if index < len(self.results) else None), out, err


def _split(text: str, steps: int) -> list[str]:
    parts = re.split(rf"\n?{re.escape(_SENTINEL)}(\d+)\n", text)
    found = [""] * steps
    for number, chunk in zip(parts[1::2], parts[2::2], strict=True):
        found[int(number)] = chunk
    return found


def _environment(unit: Unit) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BABELQ_") or k == "BABELQ_CHROMIUM"}
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(Path(bin_dir).parent)
    env.update(PYTHONUNBUFFERED="1", PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.update(unit.env)
    return env


def _scratch(base: Path) -> Path:
    base.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        if (ROOT / name).exists():
            (base / name).symlink_to(ROOT / name, target_is_directory=True)
    return base


def run_unit(unit: Unit, workdir: Path) -> Run:
    """Run ``unit``'s blocks in one process in ``workdir`` (created)."""
    cwd = _scratch(workdir / "cwd")
    plan = [
        {"kind": b.kind, "source": b.source, "line": b.line, "path": str(ROOT / b.doc)} for b in unit.blocks
    ]
    (workdir / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    results_path = workdir / "results.json"
    stderr_path = workdir / "stderr.txt"
    with stderr_path.open("w", encoding="utf-8") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", RUNNER, str(workdir / "plan.json"), str(results_path), _SENTINEL],
            cwd=cwd, env=_environment(unit), stdout=subprocess.PIPE, stderr=stderr, text=True,
            start_new_session=True,
        )
        assert proc.stdout is not None
        chunks: list[str] = []
        reader = threading.Thread(target=_read_lines, args=(proc.stdout, chunks), daemon=True)
        reader.start()
        problem = _supervise(proc, unit, chunks)
        reader.join(timeout=10)
    _kill_group(proc.pid, grace=15.0)
    stdout = "".join(chunks)
    results = json.loads(results_path.read_text(encoding="utf-8")) if results_path.exists() else []
    if problem is None and proc.returncode != 0 and len(results) < len(unit.blocks):
        problem = f"the runner exited {proc.returncode}"
    n = len(unit.blocks)
    return Run(results, _split(stdout, n), _split(stderr_path.read_text(encoding="utf-8"), n), problem)


def _read_lines(stream: Any, into: list[str]) -> None:
    for line in iter(stream.readline, ""):
        into.append(line)


def _supervise(proc: subprocess.Popen[str], unit: Unit, chunks: list[str]) -> str | None:
    """Wait for ``proc``; signal a ``stop after`` block once its text shows; kill it at the time limit."""
    deadline = time.monotonic() + unit.timeout
    signalled: set[int] = set()
    while proc.poll() is None:
        if time.monotonic() > deadline:
            _kill_group(proc.pid)
            proc.wait()
            return f"timed out after {unit.timeout:.0f} s (docs-test: timeout N to allow more)"
        parts = _split("".join(list(chunks)), len(unit.blocks))
        for index, b in enumerate(unit.blocks):
            if b.stop_after and index not in signalled and b.stop_after in parts[index]:
                signalled.add(index)
                proc.send_signal(signal.SIGTERM)
        time.sleep(0.1)
    return None


def _kill_group(pid: int, grace: float = 0.0) -> None:
    """End whatever the block left running (a background job, a Spark JVM still writing its class
    archive at exit gets ``grace`` seconds first): the process group is the runner's."""
    end = time.monotonic() + grace
    try:
        while time.monotonic() < end:
            os.killpg(pid, 0)
            time.sleep(0.2)
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


_RUNS: dict[str, Run] = {}


def run_of(block: Block, tmp_path_factory: pytest.TempPathFactory) -> tuple[Unit, Run]:
    unit = UNITS[block.where]
    for service in sorted(unit.needs):
        require_service(service)
    if unit.name not in _RUNS:
        workdir = tmp_path_factory.mktemp(re.sub(r"[^\w]+", "-", unit.name)[-40:])
        _RUNS[unit.name] = run_unit(unit, workdir)
    return unit, _RUNS[unit.name]


# --- checking output --------------------------------------------------------------------------


def _pattern(expected: str) -> re.Pattern[str]:
    parts = re.split(r"(\.\.\.|…)", expected.strip())
    return re.compile("".join(".*" if p in ("...", "…") else re.escape(p) for p in parts))


def missing_lines(expected: list[str], output: str) -> list[str]:
    """The expected lines (from the first one not found on) that ``output`` lacks in order."""
    actual = [line.strip() for line in output.splitlines()]
    at = 0
    for n, line in enumerate(expected):
        if not line.strip():
            continue
        pattern = _pattern(line)
        while at < len(actual) and not pattern.fullmatch(actual[at]):
            at += 1
        if at == len(actual):
            return expected[n:]
        at += 1
    return []


def _tail(text: str, size: int = 4000) -> str:
    return text if len(text) <= size else "…" + text[-size:]


def check_step(block: Block, unit: Unit, run: Run) -> None:
    index = unit.blocks.index(block)
    result, out, err = run.step(index)
    context = f"{block.where} ({unit.name})" if len(unit.blocks) > 1 else block.where
    if result is None:
        earlier = next(
            (unit.blocks[i].where for i, r in enumerate(run.results) if r["status"] != "ok"), None
        )
        why = run.problem or (f"{earlier} failed before it" if earlier else "the runner stopped")
        pytest.fail(f"{context}: not reached: {why}\nstdout:\n{_tail(out)}\nstderr:\n{_tail(err)}")
    streams = f"stdout:\n{_tail(out)}\nstderr:\n{_tail(err)}"
    assert result["status"] == "ok", f"{context}: {result['status']}\n{streams}"
    for command in result["commands"]:
        shown = command["expected"]
        lacking = missing_lines(shown, command["output"])
        assert not lacking, (
            f"{context}: `$ {command['command']}` did not print {lacking[0]!r}\n"
            f"output:\n{_tail(command['output'])}"
        )
        error_shown = any(": error:" in line or line.startswith("error") for line in shown)
        assert command["code"] == 0 or error_shown, (
            f"{context}: `$ {command['command']}` exited {command['code']}\n{_tail(command['output'])}"
        )
    if "pip install" in block.source:
        assert "does not provide the extra" not in out + err, f"{context}: an extra that does not exist"


def check_json(block: Block) -> None:
    import babelq

    document = json.loads(block.source)
    if isinstance(document, dict) and ("job" in document or "urn" in document) and "meta" in document:
        envelope = babelq.decode(block.source.strip().encode())
        assert envelope.accepts(), f"{block.where}: the envelope is rejected: {envelope.rejection()}"


# --- command lines shown, run or not --------------------------------------------------------


@cache
def _cli() -> argparse.ArgumentParser:
    from babelq.cli.main import build_parser

    return build_parser()


def _commands_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options_of(parser: argparse.ArgumentParser) -> dict[str, bool]:
    """Option string -> shown in ``--help`` (False: an old spelling still accepted, not to be taught)."""
    return {s: a.help != argparse.SUPPRESS for a in parser._actions for s in a.option_strings}


def cli_problems(source: str) -> list[str]:
    """What is wrong with the ``babelq ...`` command lines of a block (synopses included):
    an option the command does not have, or an old spelling ``--help`` no longer shows."""
    problems: list[str] = []
    for shown in re.sub(r"\\\n", " ", source).splitlines():
        line = shown.strip().removeprefix("$ ")
        if not _COMMAND_LINE.match(line):
            continue
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            tokens = line.split()
        parser, name = _cli(), "babelq"
        for token in tokens[1:]:
            for word in re.split(r"[\[\]|]", token):
                option = word.split("=", 1)[0]
                options = _options_of(parser)
                if option in _commands_of(parser):
                    parser, name = _commands_of(parser)[option], f"{name} {option}"
                elif re.fullmatch(r"--[\w-]+", option):
                    if option not in options:
                        problems.append(f"`{name}` has no option {option} (in: {line})")
                    elif not options[option]:
                        problems.append(
                            f"`{name} {option}` is an old spelling --help no longer shows (in: {line})"
                        )
                elif re.fullmatch(r"-([a-zA-Z])\1*", option) and f"-{option[1]}" not in options:
                    problems.append(f"`{name}` has no option -{option[1]} (in: {line})")
    return problems


# --- the tests --------------------------------------------------------------------------------


def _params() -> Iterator[Any]:
    for b in BLOCKS:
        if b.kind == "text" and not any(_COMMAND_LINE.match(line.strip().removeprefix("$ "))
                                        for line in b.source.splitlines()):
            continue  # output or a diagram: nothing to run or check
        marks: list[Any] = []
        unit = UNITS.get(b.where)
        if unit is not None:
            if unit.spark:
                marks += [pytest.mark.spark, pytest.mark.slow]
            marks.append(pytest.mark.timeout(unit.timeout + 60))
        yield pytest.param(b.where, id=b.where, marks=marks)


@pytest.mark.parametrize("where", list(_params()))
def test_block(where: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    block = BY_WHERE[where]
    problems = cli_problems(block.source)
    assert not problems, f"{where}: " + "\n".join(problems)
    if block.skip:
        pytest.skip(f"{where}: {block.skip}")
    if block.kind == "text":
        return  # a synopsis: its command lines are what can be checked
    if block.kind == "json":
        check_json(block)
        return
    if block.kind == "output":
        source = _ran_before(block)
        assert source is not None, f"{where}: an output block with no runnable block above it"
        if source.skip:
            pytest.skip(f"{where}: the output of {source.where}, which is skipped")
        unit, run = run_of(source, tmp_path_factory)
        check_step(source, unit, run)
        _, out, _ = run.step(unit.blocks.index(source))
        lacking = missing_lines(block.source.splitlines(), out)
        assert not lacking, f"{where}: {source.where} did not print {lacking[0]!r}\nstdout:\n{_tail(out)}"
        return
    assert block.kind != "unknown", f"{where}: no rule for the language {block.lang!r}; add it to this module"
    unit, run = run_of(block, tmp_path_factory)
    check_step(block, unit, run)


def test_the_pages_have_blocks_and_every_marker_makes_sense() -> None:
    assert len(BLOCKS) >= 80
    assert sum(b.runs and not b.skip for b in BLOCKS) >= 60
    for b in BLOCKS:
        assert b.kind != "unknown", f"{b.where}: no rule for the language {b.lang!r}"
        if b.skip:
            assert b.runs or b.kind == "json", f"{b.where}: only a runnable block can be skipped"
            assert b.sequence is None, f"{b.where}: a skipped block cannot be part of a sequence"
        if b.sequence or b.env or b.timeout or b.spark or b.stop_after or b.needs:
            assert b.runs, f"{b.where}: run markers on a block that does not run"
        if b.stop_after:
            assert b.kind == "python", f"{b.where}: stop after is for Python blocks"
        if b.output:
            assert b.kind == "output", f"{b.where}: output marks a text block"
            assert _ran_before(b) is not None, f"{b.where}: an output block with no runnable block above"
    sequences: dict[str, int] = {}
    for unit in UNITS.values():
        sequences[unit.name] = len(unit.blocks)
    lonely = [name for name, n in sequences.items() if " sequence " in name and n < 2]
    assert not lonely, f"a sequence of one block: {lonely}"


def test_the_scheduler_runs_this_module_with_the_spark_modules() -> None:
    from conftest import spark_unit

    assert any(b.spark for b in BLOCKS)
    assert spark_unit(ROOT, str(Path(__file__).relative_to(ROOT))) == "spark-processes"


def test_skips_are_few_and_explained() -> None:
    skipped = [(b.where, b.skip) for b in BLOCKS if b.skip]
    listing = "\n".join(f"  {where}: {reason}" for where, reason in skipped)
    print(f"{len(skipped)} doc blocks are not run here:\n{listing}")
    assert all(reason and len(reason) >= 10 for _, reason in skipped), listing
    assert len(skipped) <= MAX_SKIPS, f"more than {MAX_SKIPS} blocks are skipped:\n{listing}"


def test_command_lines_are_checked_against_the_parsers() -> None:
    assert cli_problems("babelq relay --outbox URL --broker URL [--publish-batch N] [--once]\n") == []
    assert cli_problems("$ babelq [-v|-vv] outbox status URL [--table T] --failed 3\n") == []
    assert cli_problems("babelq worker --app a:app \\\n    --url redis://h/0 --nope\n") == [
        "`babelq worker --url` is an old spelling --help no longer shows (in: babelq worker --app a:app "
        "     --url redis://h/0 --nope)",
        "`babelq worker` has no option --nope (in: babelq worker --app a:app      --url redis://h/0 --nope)",
    ]


def test_output_comparison_matches_in_order_with_wildcards() -> None:
    output = "log line\nhandled 1 of 2\nnoise\ntrace=abc done\n"
    assert missing_lines(["handled 1 of 2", "trace=… done"], output) == []
    assert missing_lines(["trace=... done", "handled 1 of 2"], output) == ["handled 1 of 2"]
    assert missing_lines(["handled 2 of 2"], output) == ["handled 2 of 2"]


def test_parse_reads_markers_and_refuses_stray_ones(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "x\n<!-- docs-test: sequence s; needs redis -->\n<!-- docs-test: timeout 9 -->\n"
        "```python\nprint(1)\n```\n\n<!-- docs-test: skip (no broker here) -->\n```sh\nexit 1\n```\n",
        encoding="utf-8",
    )
    first, second = parse(page, tmp_path)
    assert (first.sequence, first.needs, first.timeout, first.lang, first.line) == ("s", {"redis"}, 9.0,
                                                                                    "python", 4)
    assert first.source == "print(1)\n"
    assert second.skip == "no broker here" and second.kind == "shell"
    page.write_text("```mermaid\nflowchart LR\n    a --> b\n```\n", encoding="utf-8")
    (diagram,) = parse(page, tmp_path)
    assert (diagram.kind, diagram.runs) == ("text", False)
    page.write_text("<!-- docs-test: sequence s -->\n\n```python\npass\n```\n", encoding="utf-8")
    with pytest.raises(MarkerError, match="right above a fence"):
        parse(page, tmp_path)
    page.write_text("<!-- docs-test: skip -->\n```python\npass\n```\n", encoding="utf-8")
    with pytest.raises(MarkerError, match="reason"):
        parse(page, tmp_path)
    page.write_text("<!-- docs-test: nonsense -->\n```python\npass\n```\n", encoding="utf-8")
    with pytest.raises(MarkerError, match="unknown"):
        parse(page, tmp_path)

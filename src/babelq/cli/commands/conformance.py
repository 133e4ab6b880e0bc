"""``babelq conformance PATH``: run a conformance suite directory and print a table per block.

``--broker URL`` (else ``$BABELQ_BROKER``, else ``memory://``; ``--transport`` is its old,
hidden spelling) is the broker of the Redis payload-identity round trip. It is opened (and
closed) before the suite runs: a URL that is malformed or
names an unreachable broker is a usage error (one line, exit 2), not a failing check, so exit
code 1 keeps meaning "this SDK breaks the standard". The report is redacted like every error
line, because a check's message may quote the URL it was given.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from babelq.cli.commands import broker_argument, broker_url, write

if TYPE_CHECKING:
    from babelq.cli.commands import Subparsers
    from babelq.conformance import SuiteResult


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "conformance",
        help="run a BabelQueue conformance suite directory",
        description="Run every block of a suite directory (manifest.json, fixtures/, schema/).",
    )
    parser.add_argument("path", metavar="PATH", help="the suite directory")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    parser.add_argument("--all", action="store_true", help="list every check, not only the failing ones")
    broker_argument(
        parser,
        "--transport",
        required=False,
        example="redis://127.0.0.1:6379/0, for the Redis payload-identity round trip",
        fallback="memory://",
    )
    parser.set_defaults(func=run)


def table(result: SuiteResult, *, every: bool = False) -> str:
    """The human report: passed/failed per block, then the failing (or all) checks."""
    rows = result.blocks()
    width = max([len("block"), len("total"), *(len(name) for name in rows)])
    lines = [f"{'block':<{width}}  passed  failed"]
    for name, (passed, failed) in rows.items():
        lines.append(f"{name:<{width}}  {passed:>6}  {failed:>6}")
    total_failed = len(result.failures())
    lines.append(f"{'total':<{width}}  {len(result.checks) - total_failed:>6}  {total_failed:>6}")
    shown = result.checks if every else result.failures()
    if shown:
        lines.append("")
        lines.append("checks:" if every else "failing checks:")
        for check in shown:
            mark = "PASS" if check.passed else "FAIL"
            lines.append(f"  {mark} {check.id}" + (f": {check.message}" if check.message else ""))
    lines.append("")
    lines.append(f"{result.path}: {'PASSED' if result.passed else 'FAILED'}")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    from babelq.conformance import run_suite
    from babelq.urls import redact_text

    url = broker_url(args)
    if url:
        from babelq.transports import open_transport

        open_transport(url).close()
    result = run_suite(args.path, transport_url=url)
    write(redact_text(result.to_json() + "\n" if args.json else table(result, every=args.all)))
    return 0 if result.passed else 1

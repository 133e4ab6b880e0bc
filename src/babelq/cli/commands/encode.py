"""``babelq encode URN DATA_JSON``: print the canonical body of a new envelope.

Handy for feeding a queue from a shell (``redis-cli RPUSH orders "$(babelq encode ...)"``)
and for seeing exactly the bytes every SDK of the standard produces.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from babelq.cli.commands import write_bytes

if TYPE_CHECKING:
    from babelq.cli.commands import Subparsers


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "encode",
        help="print the canonical body of a new envelope",
        description="Build an envelope with fresh ids and print its canonical wire bytes (one line).",
    )
    parser.add_argument("urn", metavar="URN", help="the message URN, e.g. urn:babel:orders:created")
    parser.add_argument("data", metavar="DATA_JSON", help="the data object as JSON ('-' reads it from stdin)")
    parser.add_argument("--queue", default="default", help="meta.queue")
    parser.add_argument("--trace-id", help="continue this trace instead of starting a new one")
    parser.add_argument("--correlation-id", help="meta.correlation_id")
    parser.add_argument("--sharding-key", help="meta.sharding_key")
    parser.add_argument("--priority", type=int, help="meta.priority (1..10)")
    parser.add_argument("--strict", action="store_true", help="refuse a badly formed URN instead of warning")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from babelq.envelope import make

    text = sys.stdin.read() if args.data == "-" else args.data
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        print(f"babelq encode: error: DATA_JSON is not JSON: {exc}", file=sys.stderr)
        return 2
    except RecursionError:
        # Python's json parser recurses once per level and gives up near the interpreter's
        # recursion limit (~1,000 levels); no envelope a consumer reads is that deep.
        print("babelq encode: error: DATA_JSON is nested too deeply (about 1,000 levels)", file=sys.stderr)
        return 2
    if not isinstance(data, dict):
        kind = type(data).__name__
        print(f"babelq encode: error: DATA_JSON must be a JSON object, got {kind}", file=sys.stderr)
        return 2
    env = make(
        args.urn,
        data,
        queue=args.queue,
        trace_id=args.trace_id,
        correlation_id=args.correlation_id,
        sharding_key=args.sharding_key,
        priority=args.priority,
        strict=args.strict,
    )
    write_bytes(env.encode() + b"\n")
    return 0

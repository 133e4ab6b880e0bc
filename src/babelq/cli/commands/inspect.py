"""``babelq inspect``: what a consumer would make of some bodies, and why.

Input is one body, a file with one body per line, or (``--array``) a JSON array of bodies
(objects, or strings holding a body). Each body gets a verdict:

- ``accepted``: the consumer rules hold; it would reach a handler;
- ``rejected``: a JSON object that breaks a consumer rule (the reason says which); a
  runtime dead-letters it as poison;
- ``poison``: not readable as a JSON object at all (not UTF-8, not JSON, not an object).

Empty input (nothing, or only whitespace) is one body, and it is poison: a consumer handed
those bytes cannot read them, so inspect must not call them "no bodies" and look clean.

Exit status:

- 0: every body is accepted;
- 1: at least one body is rejected or poison (empty input is one poison body), or an
  ``--array`` input is an empty array (no body at all);
- 2: the input cannot be read: a missing file, an ``--array`` input that is not a JSON array
  or is nested too deeply for the parser.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from babelq.cli.commands import write

if TYPE_CHECKING:
    from babelq.cli.commands import Subparsers

_PREVIEW = 200
#: Recursion limit while reports are rendered (see :func:`room_for_deep_documents`).
_RENDER_RECURSION_LIMIT = 5_000


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "inspect",
        help="say whether bodies would be accepted, and show them",
        description="Decode message bodies and report the consumer's verdict on each.",
    )
    parser.add_argument("file", nargs="?", default="-", metavar="FILE", help="a file of bodies ('-': stdin)")
    parser.add_argument("--array", action="store_true", help="the input is a JSON array of bodies")
    parser.add_argument("--json", action="store_true", help="print a JSON array of reports")
    parser.add_argument("--brief", action="store_true", help="leave out the pretty-printed document")
    parser.set_defaults(func=run)


def split_bodies(raw: bytes, *, array: bool = False) -> list[bytes]:
    """The bodies held by ``raw``: one JSON object, one per line, or the items of a JSON array.

    Empty or blank ``raw`` is one body (``raw`` itself), which a consumer would call poison.
    Raises ValueError when ``array`` is set and ``raw`` is not a JSON array, or is nested too deeply.
    """
    if array:
        try:
            items = json.loads(raw)
            if not isinstance(items, list):
                raise ValueError("--array input must be a JSON array")
            return [
                item.encode("utf-8", "surrogatepass") if isinstance(item, str)
                else json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
                for item in items
            ]
        except RecursionError:
            # json recurses per level and stops near the recursion limit (~1,000 levels)
            raise ValueError("--array input is nested too deeply (about 1,000 levels)") from None
    from babelq.envelope import wire

    whole = raw.strip()
    if not whole:
        return [raw]
    if wire.is_json_object(whole):
        return [whole]
    return [line.strip() for line in raw.split(b"\n") if line.strip()]


@contextmanager
def room_for_deep_documents() -> Iterator[None]:
    """Raise the recursion limit while reports are rendered.

    Python's json encoder, which prints the pretty document and ``--json``, recurses once or
    more per level of nesting and stops near the default limit of 1,000 frames, a depth of the
    same order as the deepest body the decoder accepts (deeper is poison). A body a consumer
    would hand to a handler must never crash the tool that shows it.
    """
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(max(previous, _RENDER_RECURSION_LIMIT))
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


def iso_ms(ms: object) -> str | None:
    """Epoch milliseconds as an RFC 3339 UTC string, or None when it is not a usable time."""
    if type(ms) is not int:
        return None
    try:
        moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def report(body: bytes) -> dict[str, Any]:
    """The verdict on one body, with the fields a person looks at first."""
    from babelq.envelope import decode
    from babelq.errors import DecodeError

    try:
        env = decode(body)
    except DecodeError as exc:
        return {
            "verdict": "poison",
            "reason": exc.reason,
            "size": len(body),
            "preview": body[:_PREVIEW].decode("utf-8", "replace"),
        }
    reason = env.rejection()
    doc = env.document()
    meta = env.meta
    created_at = meta.get("created_at")
    out: dict[str, Any] = {
        "verdict": "accepted" if reason is None else "rejected",
        "reason": reason,
        "urn": env.urn or None,
        "id": meta.get("id"),
        "trace_id": doc.get("trace_id"),
        "attempts": doc.get("attempts"),
        "lang": meta.get("lang"),
        "queue": meta.get("queue"),
        "created_at": created_at,
        "created_at_iso": iso_ms(created_at),
    }
    if env.dead_letter is not None:
        out["dead_letter"] = env.dead_letter
    out["document"] = doc
    return out


def _text(index: int, item: dict[str, Any], *, brief: bool) -> str:
    verdict = item["verdict"]
    head = f"[{index}] {verdict}" + (f": {item['reason']}" if item.get("reason") else "")
    lines = [head]
    if verdict == "poison":
        lines.append(f"    size        {item['size']} bytes")
        lines.append(f"    preview     {item['preview']!r}")
        return "\n".join(lines)
    created = item["created_at"]
    when = f"{item['created_at_iso']} ({created})" if item["created_at_iso"] else json.dumps(created)
    for label, value in (
        ("urn", item["urn"]),
        ("meta.id", item["id"]),
        ("trace_id", item["trace_id"]),
        ("attempts", item["attempts"]),
        ("lang", item["lang"]),
        ("queue", item["queue"]),
        ("created_at", when),
    ):
        lines.append(f"    {label:<11} {value if isinstance(value, str) else json.dumps(value)}")
    block = item.get("dead_letter")
    if block is not None:
        lines.append(f"    dead_letter {block.get('reason')}: {block.get('error')}")
    if not brief:
        pretty = json.dumps(item["document"], ensure_ascii=False, indent=2)
        lines.extend("    " + line for line in pretty.splitlines())
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        if args.file == "-":
            raw = sys.stdin.buffer.read()
        else:
            with open(args.file, "rb") as handle:
                raw = handle.read()
    except OSError as exc:
        print(f"babelq inspect: error: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        bodies = split_bodies(raw, array=args.array)
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        print(f"babelq inspect: error: {exc}", file=sys.stderr)
        return 2
    reports = [report(body) for body in bodies]
    with room_for_deep_documents():
        if args.json:
            write(json.dumps(reports, ensure_ascii=False, indent=2) + "\n")
        else:
            for index, item in enumerate(reports, start=1):
                write(_text(index, item, brief=args.brief) + "\n")
            verdicts = ("accepted", "rejected", "poison")
            counts = {v: sum(1 for r in reports if r["verdict"] == v) for v in verdicts}
            noun = "body" if len(reports) == 1 else "bodies"
            write(f"{len(reports)} {noun}: " + ", ".join(f"{n} {v}" for v, n in counts.items()) + "\n")
    if not reports:
        print("babelq inspect: the --array input holds no message bodies", file=sys.stderr)
        return 1
    return 0 if all(item["verdict"] == "accepted" for item in reports) else 1

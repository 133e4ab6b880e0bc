"""``babelq schema``: a schema registry's checks for people and CI.

``--registry PATH`` is a registry manifest (``registry.json``), a schema file or a directory of
schema files, read as :meth:`babelq.schema.SchemaRegistry.load` reads them.

- ``check``: with no FILE, load the registry (every schema file read and compiled) and list its
  URNs; with FILEs, check each message (one envelope, one per line, or ``--array``) against its
  URN's schema, or each bare data object against ``--urn``'s.
- ``compat OLD NEW``: the breaking changes from one version of a schema to the next: two schema
  files, two manifests (every URN of OLD, or ``--urn``'s), or one of each with ``--urn``.
- ``gdpr``: the fields each URN marks ``x-gdpr-sensitive``; ``--require`` fails on fields whose
  name looks personal but carry no mark; ``--mask FILE`` prints the messages with the marked
  values masked.
- ``asyncapi``: an AsyncAPI 3.0 document of the registry's URNs.

Exit status: 0 when everything checked is valid, compatible or clean; 1 when a message is
invalid, a change breaking or a personal field unmarked; 2 when an input cannot be read (a bad
registry is one line naming the file, the entry and the schema file).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from babelq.cli.commands import write

if TYPE_CHECKING:
    from babelq.cli.commands import Subparsers
    from babelq.schema import SchemaRegistry

DEFAULT_REGISTRY = "registry.json"


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "schema",
        help="check messages and schema changes against a schema registry (registry.json)",
        description="A schema registry's checks: messages, compatibility, personal data, AsyncAPI.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    check = actions.add_parser("check", help="load the registry, or check messages against it")
    _registry_option(check)
    check.add_argument("files", nargs="*", metavar="FILE", help="files of messages ('-': stdin)")
    check.add_argument("--array", action="store_true", help="each input is a JSON array of messages")
    check.add_argument("--urn", help="the inputs are bare data objects of this URN, not envelopes")
    check.add_argument("--required", action="store_true", help="a message whose URN has no schema fails")

    compat = actions.add_parser("compat", help="the breaking changes between two versions of a schema")
    compat.add_argument("old", metavar="OLD", help="the schema (or registry manifest) in use")
    compat.add_argument("new", metavar="NEW", help="the changed schema (or registry manifest)")
    compat.add_argument("--urn", help="compare this URN of the manifest(s)")
    compat.add_argument(
        "--mode", choices=("backward", "forward", "full"), default="backward",
        help="backward: consumers on NEW read OLD's data (the registry's rule, default); "
        "forward: consumers on OLD read NEW's; full: both",
    )  # fmt: skip

    gdpr = actions.add_parser("gdpr", help="list the personal-data fields, audit them, mask messages")
    _registry_option(gdpr)
    gdpr.add_argument("--urn", help="only this URN (and the URN of bare data objects for --mask)")
    gdpr.add_argument(
        "--require",
        action="store_true",
        help="fail when a field whose name looks personal has no x-gdpr-sensitive mark",
    )
    gdpr.add_argument(
        "--pattern", metavar="REGEX", help="what a personal field's name looks like (--require)"
    )
    gdpr.add_argument("--mask", metavar="FILE", help="print these messages with the marked values masked")

    asyncapi = actions.add_parser("asyncapi", help="an AsyncAPI 3.0 document of the registry's URNs")
    _registry_option(asyncapi)
    asyncapi.add_argument("-o", "--output", metavar="FILE", help="write it here instead of stdout")
    asyncapi.add_argument("--title", default="BabelQueue messages", help="info.title")
    asyncapi.add_argument("--doc-version", default="1.0.0", help="info.version")
    parser.set_defaults(func=run)


def _registry_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--registry", metavar="PATH", default=DEFAULT_REGISTRY,
        help=f"a registry.json manifest, a schema file or a directory of them (default: {DEFAULT_REGISTRY})",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    action = {"check": _check, "compat": _compat, "gdpr": _gdpr, "asyncapi": _asyncapi}[args.action]
    return action(args)


def _load(path: str) -> SchemaRegistry:
    from babelq.errors import ConfigurationError
    from babelq.schema import SchemaRegistry

    if not Path(path).exists():
        raise ConfigurationError(f"--registry {path}: no such file or directory")
    registry = SchemaRegistry()
    registry.load(path)
    return registry


def _bodies(name: str, *, array: bool) -> list[bytes]:
    from babelq.cli.commands.inspect import split_bodies
    from babelq.errors import ConfigurationError

    try:
        raw = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"cannot read {name}: {exc.strerror or exc}") from None
    try:
        return split_bodies(raw, array=array)
    except ValueError as exc:
        raise ConfigurationError(f"{name}: {exc}") from None


def _read_object(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def _target(body: bytes, urn: str | None) -> tuple[str | None, Any, str | None]:
    """(URN, data, why unusable) of one input: an envelope, or bare data of ``urn``."""
    if urn is not None:
        data = _read_object(body)
        return (urn, data, None) if isinstance(data, dict) else (urn, None, "not a JSON object")
    from babelq.envelope import decode
    from babelq.errors import DecodeError

    try:
        envelope = decode(body)
    except DecodeError as exc:
        return None, None, f"poison: {exc.reason}"
    reason = envelope.rejection()
    if reason is not None:
        return envelope.urn or None, None, f"rejected: {reason}"
    return envelope.urn, dict(envelope.data), None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _check(args: argparse.Namespace) -> int:
    registry = _load(args.registry)
    if not args.files:
        for known in registry:
            entry = registry.entry(known)
            extra = [
                f"{k} {v}"
                for k, v in (("owner", entry and entry.owner), ("status", entry and entry.status))
                if v
            ]
            write(f"ok {known}" + (f" ({', '.join(extra)})" if extra else "") + "\n")
        write(f"{_plural(len(registry), 'URN')} in {args.registry}\n")
        return 0
    counts = {"valid": 0, "invalid": 0, "unchecked": 0}
    for file in args.files:
        bodies = _bodies(file, array=args.array)
        for index, body in enumerate(bodies, start=1):
            where = file if len(bodies) == 1 else f"{file}:{index}"
            urn, data, unusable = _target(body, args.urn)
            label = f"{where} [{urn}]" if urn else where
            if unusable is not None or urn is None:
                counts["invalid"] += 1
                write(f"{label}: {unusable}\n")
                continue
            if urn not in registry:
                key = "invalid" if args.required else "unchecked"
                counts[key] += 1
                write(f"{label}: no schema for this URN" + ("\n" if args.required else " (not checked)\n"))
                continue
            errors = registry.validate(urn, data)
            if not errors:
                counts["valid"] += 1
                write(f"{label}: ok\n")
                continue
            counts["invalid"] += 1
            write(f"{label}: {_plural(len(errors), 'problem')}\n")
            for error in errors:
                write(f"    {error}\n")
    total = sum(counts.values())
    write(f"{_plural(total, 'message')}: " + ", ".join(f"{n} {k}" for k, n in counts.items()) + "\n")
    return 1 if counts["invalid"] else 0


def _schema_side(path: str, urn: str | None, side: str) -> dict[str, Any]:
    """URN (or the file's name) -> schema, for one side of ``compat``."""
    from babelq.errors import ConfigurationError
    from babelq.schema import SchemaRegistry, compile_schema
    from babelq.schema.manifest import MANIFEST_DRAFT, is_manifest

    target = Path(path)
    try:
        content = json.loads(target.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"{side} {path}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ConfigurationError(f"{side} {path}: not JSON: {' '.join(str(exc).split())}") from None
    if is_manifest(content):
        registry = SchemaRegistry.from_manifest(target)
        if urn is None:
            return {u: registry.get(u) for u in registry}
        schema = registry.get(urn)
        if schema is None:
            raise ConfigurationError(f"{side} {path}: the registry has no {urn}")
        return {urn: schema}
    if not isinstance(content, dict | bool):
        raise ConfigurationError(f"{side} {path}: a schema must be a JSON object")
    try:
        compile_schema(content, draft=MANIFEST_DRAFT)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{side} {path}: {exc}") from None
    return {urn or "": content}


def _compat(args: argparse.Namespace) -> int:
    from babelq.errors import ConfigurationError
    from babelq.schema.compat import Change, breaking_changes

    old = _schema_side(args.old, args.urn, "OLD")
    new = _schema_side(args.new, args.urn, "NEW")
    if ("" in old and "" not in new) or ("" in new and "" not in old):
        raise ConfigurationError("compat: comparing a schema file with a registry needs --urn URN")
    breaking = 0
    for key, before in old.items():
        label = key or args.new
        if key not in new:
            changes = [Change("", "no longer in the registry")]
        else:
            changes = breaking_changes(before, new[key], mode=args.mode)
        if not changes:
            write(f"{label}: compatible\n")
            continue
        breaking += 1
        write(f"{label}: {_plural(len(changes), 'breaking change')} (publish it under a new URN instead)\n")
        for change in changes:
            write(f"    {change}\n")
    if len(old) > 1:
        write(f"{_plural(len(old), 'URN')} compared: {breaking} breaking\n")
    return 1 if breaking else 0


def _gdpr(args: argparse.Namespace) -> int:
    import re

    from babelq.errors import ConfigurationError
    from babelq.schema.masking import PERSONAL_NAMES, marked_fields, unmarked_personal_fields

    registry = _load(args.registry)
    if args.urn is not None and args.urn not in registry:
        raise ConfigurationError(f"--urn {args.urn}: not in the registry {args.registry}")
    if args.mask is not None:
        return _mask(args, registry)
    urns = [args.urn] if args.urn else list(registry)
    total = 0
    for urn in urns:
        fields = marked_fields(registry.get(urn) or {})
        total += len(fields)
        write(
            f"{urn}: " + (_plural(len(fields), "sensitive field") if fields else "no sensitive fields") + "\n"
        )
        for path, category in fields:
            write(f"    {path}" + (f" ({category})" if category else "") + "\n")
    write(f"{_plural(len(urns), 'URN')}, {_plural(total, 'sensitive field')}\n")
    if not args.require:
        return 0
    pattern = args.pattern or PERSONAL_NAMES
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ConfigurationError(f"--pattern {pattern!r}: not a regular expression: {exc}") from None
    unmarked = [
        (urn, path) for urn in urns for path in unmarked_personal_fields(registry.get(urn) or {}, pattern)
    ]
    for urn, path in unmarked:
        write(f"unmarked: {urn}: {path} looks like personal data but has no x-gdpr-sensitive mark\n")
    write(f"{_plural(len(unmarked), 'unmarked personal field')}\n")
    return 1 if unmarked else 0


def _mask(args: argparse.Namespace, registry: SchemaRegistry) -> int:
    from babelq.envelope import decode
    from babelq.errors import DecodeError
    from babelq.schema.masking import mask

    failed = 0
    for body in _bodies(args.mask, array=False):
        document = _read_object(body)
        is_envelope = (
            isinstance(document, dict) and "data" in document and ("job" in document or "urn" in document)
        )
        if is_envelope:
            try:
                envelope = decode(body)
            except DecodeError as exc:
                failed += 1
                print(f"babelq schema gdpr: not printed: poison: {exc.reason}", file=sys.stderr)
                continue
            urn, data = envelope.urn, dict(envelope.data)
        elif isinstance(document, dict) and args.urn is not None:
            urn, data = args.urn, document
        else:
            failed += 1
            why = "not a JSON object" if not isinstance(document, dict) else "bare data needs --urn URN"
            print(f"babelq schema gdpr: not printed: {why}", file=sys.stderr)
            continue
        schema = registry.get(urn)
        if schema is None:
            failed += 1  # printing it unmasked could leak what the missing schema would mark
            print(f"babelq schema gdpr: not printed: no schema for {urn}", file=sys.stderr)
            continue
        masked = mask(data, schema)
        shown = {**envelope.document(), "data": masked} if is_envelope else masked
        write(json.dumps(shown, ensure_ascii=False) + "\n")
    return 1 if failed else 0


def _asyncapi(args: argparse.Namespace) -> int:
    from babelq.errors import ConfigurationError
    from babelq.schema.asyncapi import asyncapi_document

    registry = _load(args.registry)
    document = asyncapi_document(registry, title=args.title, version=args.doc_version)
    text = json.dumps(document, ensure_ascii=False, indent=2) + "\n"
    if args.output is None:
        write(text)
        return 0
    try:
        Path(args.output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"--output {args.output}: cannot write: {exc.strerror or exc}") from None
    print(f"wrote {args.output} ({_plural(len(registry), 'URN')})", file=sys.stderr)
    return 0

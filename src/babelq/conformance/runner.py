"""Running a whole suite: every manifest block, each isolated so one crash hides nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Final

from babelq.conformance import (
    binding_blocks,
    envelope_blocks,
    envelope_cases,
    idempotency_block,
    payload_block,
)
from babelq.conformance.result import Recorder, SuiteResult
from babelq.conformance.suite import Suite, SuiteError

log = logging.getLogger(__name__)

#: Manifest keys that are not blocks.
_FRAME: Final = frozenset({"schema_version", "description"})
#: Blocks this runner checks, in the order it runs them.
KNOWN_BLOCKS: Final = (
    "cases",
    "roundtrip",
    "data_shape",
    "forbidden_keys",
    *binding_blocks.SUB_BLOCKS,
    "idempotency",
    "payload_schema",
    "payload_schema_unicode",
)


def run_suite(path: str | Path, *, transport_url: str | None = None) -> SuiteResult:
    """Run every block of the suite directory ``path``.

    ``transport_url`` chooses the transport of the Redis payload-identity round trip
    (``memory://`` by default; ``redis://...`` proves it against a live server). Raises
    :class:`~babelq.errors.ConfigurationError` when ``path`` holds no readable manifest.
    """
    suite = Suite(path)
    result = SuiteResult(Path(path))
    manifest = suite.manifest

    frame = Recorder(result, "manifest")
    version = manifest.get("schema_version")
    frame.check("schema_version", type(version) is int and version == 1, f"schema_version is {version!r}")
    for key in manifest:
        if key not in _FRAME and key not in KNOWN_BLOCKS:
            frame.check(f"unknown-block:{key}", False, f"unknown block {key!r}: this runner cannot check it")

    schema_out = Recorder(result, "schema")
    try:
        schema_out.check("message-envelope", suite.envelope_schema is not None)
    except SuiteError as exc:
        schema_out.check("message-envelope", False, str(exc))

    blocks: dict[str, Callable[[Recorder, object], None]] = {
        "cases": lambda out, block: envelope_cases.run(suite, out, block),
        "idempotency": lambda out, block: idempotency_block.run(suite, out, block),
        "roundtrip": lambda out, block: envelope_blocks.run_roundtrip(suite, out, block),
        "data_shape": lambda out, block: envelope_blocks.run_data_shape(suite, out, block),
        "forbidden_keys": lambda out, block: envelope_blocks.run_forbidden_keys(suite, out, block),
        "payload_schema": payload_block.run,
        "payload_schema_unicode": payload_block.run,
    }
    for binding in binding_blocks.SUB_BLOCKS:
        blocks[binding] = lambda out, block, name=binding: binding_blocks.run(  # type: ignore[misc]
            name, suite, out, block, transport_url
        )
    for name in KNOWN_BLOCKS:
        if name not in manifest:
            continue
        out = Recorder(result, name)
        try:
            blocks[name](out, manifest[name])
        except Exception as exc:
            log.debug("conformance block %s crashed", name, exc_info=True)
            out.check("crashed", False, f"{type(exc).__name__}: {exc}")
    return result

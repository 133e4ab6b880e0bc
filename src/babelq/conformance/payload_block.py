"""The ``payload_schema`` block: babelq's schema validation must agree on every case's ``valid``."""

from __future__ import annotations

from collections.abc import Mapping

from babelq.conformance.result import Recorder
from babelq.errors import ConfigurationError
from babelq.schema import SchemaRegistry

_URN = "urn:babel:conformance:payload.checked"


def run(out: Recorder, block: object) -> None:
    if not isinstance(block, Mapping):
        out.check("manifest", False, "the payload_schema block must be an object")
        return
    registry = SchemaRegistry()
    try:
        registry.register(_URN, block.get("schema"))  # type: ignore[arg-type]
    except ConfigurationError as exc:
        out.check("schema", False, str(exc))
        return
    cases = block.get("cases")
    if not isinstance(cases, list) or not cases:
        out.check("cases", False, "'cases' must be a non-empty list")
        return
    for index, case in enumerate(cases):
        if not isinstance(case, Mapping) or type(case.get("valid")) is not bool:
            out.check(f"#{index}", False, "a case needs 'name', 'valid' (bool) and 'data'")
            continue
        errors = registry.validate(_URN, case.get("data"), required=True)
        valid = not errors
        if valid == case["valid"]:
            message = "; ".join(errors)
        elif valid:
            message = "babelq found the data valid"
        else:
            message = "babelq rejected valid data: " + "; ".join(errors)
        out.check(str(case.get("name", f"#{index}")), valid == case["valid"], message)

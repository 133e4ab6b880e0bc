"""Running a BabelQueue conformance suite directory (docs/standard.md §10).

A suite directory holds ``manifest.json``, the fixtures it names and
``schema/message-envelope.schema.json``, in the format of the standard's cross-SDK suite.
:func:`run_suite` runs every block of the manifest against babelq and returns a
:class:`SuiteResult` of named pass/fail :class:`Check`\\ s. A block this runner does not
know is reported as a failing check, never skipped silently: an unknown block is a part of
the standard we have not proven.

>>> from babelq.conformance import run_suite
>>> result = run_suite("tests/conformance")  # doctest: +SKIP
>>> result.passed, result.blocks()["sqs"]  # doctest: +SKIP
(True, (13, 0))
"""

from babelq.conformance.result import Check, SuiteResult
from babelq.conformance.runner import KNOWN_BLOCKS, run_suite

__all__ = ["KNOWN_BLOCKS", "Check", "SuiteResult", "run_suite"]

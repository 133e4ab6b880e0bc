"""``MODULE:ATTR`` to a :class:`~babelq.pipelines.consume.Pipeline`: what ``babelq consume --app`` names.

MODULE is a dotted module (imported with the working directory on ``sys.path``, as ``python -m``
does) or a path to a ``.py`` file; ATTR defaults to ``pipeline``. The loading itself is
:func:`babelq.runtime.loading.load_object`, shared with ``babelq worker --app``.
"""

from __future__ import annotations

from babelq.errors import ConfigurationError
from babelq.pipelines.consume.api import Pipeline
from babelq.runtime.loading import load_object


def load_pipeline(spec: str, *, option: str = "--app") -> Pipeline:
    """The pipeline ``spec`` names; a one-line ConfigurationError naming ``option`` otherwise."""
    found = load_object(
        spec, option=option, example="examples/orders_pipeline.py:pipeline", default_attr="pipeline"
    )
    if not isinstance(found, Pipeline):
        attr = spec.partition(":")[2] or "pipeline"
        raise ConfigurationError(
            f"{option} {spec!r}: {attr} is a {type(found).__name__}, not a babelq.pipelines.consume.Pipeline")
    return found

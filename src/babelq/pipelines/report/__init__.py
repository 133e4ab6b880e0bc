"""The demo's operator report: one self-contained HTML page, and a PNG or PDF of it for an email.

:mod:`~babelq.pipelines.report.page` assembles the page from its sections (``value``: money per
currency; ``dlq``: the dead-letter queue by cause and value; ``timing``: where the time went),
drawn with :mod:`~babelq.pipelines.report.html` and formatted by
:mod:`~babelq.pipelines.report.display`; :mod:`~babelq.pipelines.report.export` renders the page
with headless Chromium.
"""

from babelq.pipelines.report.page import write_report

__all__ = ["write_report"]

"""The report as a picture for an email: a PNG (or PDF) of the very page, drawn by headless Chromium.

No Python renderer draws HTML and SVG the way a browser does, so the export asks one: Chromium's
own headless mode (``--screenshot`` / ``--print-to-pdf``), found at ``$BABELQ_CHROMIUM``, then
``/usr/bin/chromium`` (Debian's package), then ``chromium``, ``chromium-browser`` or
``google-chrome`` on ``PATH``. The page needs no JavaScript, and Chromium is told not to reach
the network.

A screenshot is as tall as the window, so the page is measured first: Chromium loads a copy of it
with one line of script that writes the document's height into the DOM, and ``--dump-dom`` reads
it back. The PNG is then taken of the report itself at that height (the copy is only measured),
and a PDF is printed as one page of the same size, so both show what a browser shows. The copies
and Chromium's profile live in a private temporary folder that is removed afterwards; the export
is owner-only, like the report (it shows the same payments).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from babelq.errors import ConfigurationError
from babelq.errors import ExportError as ExportError

log = logging.getLogger(__name__)

#: what ``babelq demo --export`` takes: ``auto`` exports a PNG when Chromium is found
CHOICES = ("auto", "png", "pdf", "none")
FORMATS = ("png", "pdf")
CHROMIUM_ENV = "BABELQ_CHROMIUM"
#: the page's width in CSS pixels (the report lays itself out for it)
WIDTH = 1200
#: Chromium's screenshots stop being reliable beyond this height; a taller page is cut there
MAX_HEIGHT = 16_000

_HEIGHT = re.compile(r'data-page-height="(\d+)"')
_MEASURE = ("<script>document.body.setAttribute('data-page-height', "
            "String(Math.ceil(document.documentElement.scrollHeight)))</script>")


def find_chromium() -> str | None:
    """The Chromium (or Chrome) binary to use, or None."""
    named = os.environ.get(CHROMIUM_ENV)
    if named:
        return named if os.access(named, os.X_OK) else None
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def resolve_export(choice: str, *, option: str = "export") -> str | None:
    """The format to export (``png``/``pdf``), or None.

    ``auto`` is ``png`` when Chromium is found and None otherwise; an explicit format without
    Chromium is a one-line ConfigurationError naming ``option``."""
    if choice not in CHOICES:
        raise ConfigurationError(f"{option}: {choice!r} is not one of {', '.join(CHOICES)}")
    if choice == "none":
        return None
    if find_chromium() is not None:
        return "png" if choice == "auto" else choice
    if choice == "auto":
        return None
    raise ConfigurationError(
        f"{option} {choice}: no Chromium found ({_where()}); install Debian's chromium package, set "
        f"${CHROMIUM_ENV} to a Chromium or Chrome binary, or pass {option} none")


def missing_note() -> str:
    """What the report and the log say when ``auto`` finds no Chromium."""
    return f"not exported: no Chromium found ({_where()})"


def _where() -> str:
    named = os.environ.get(CHROMIUM_ENV)
    if named:
        return f"${CHROMIUM_ENV}={named} is not executable"
    return "looked for /usr/bin/chromium and chromium, chromium-browser, google-chrome on PATH"


def export_report(path: str | Path, fmt: str = "png", *, chromium: str | None = None,
                  timeout: float = 120.0) -> Path:
    """Write ``report.png`` (or ``.pdf``) beside the HTML report at ``path``; returns its path.

    Raises ConfigurationError for an unknown format or no Chromium, ExportError when Chromium
    fails or times out."""
    if fmt not in FORMATS:
        raise ConfigurationError(f"export: {fmt!r} is not one of {', '.join(FORMATS)}")
    browser = chromium or find_chromium()
    if browser is None:
        raise ConfigurationError(f"export {fmt}: no Chromium found ({_where()})")
    page = Path(path).resolve()
    target = page.with_suffix(f".{fmt}")
    work = Path(tempfile.mkdtemp(prefix="babelq-report-"))  # 0700
    try:
        height = min(MAX_HEIGHT, measure_height(page, chromium=browser, work=work, timeout=timeout))
        out = work / f"out.{fmt}"
        if fmt == "png":
            _chromium(browser, work, [f"--window-size={WIDTH},{height}", f"--screenshot={out}"], page,
                      timeout)
        else:
            printable = work / "print.html"
            size = (f"<style>@page {{ size: {WIDTH}px {height + 8}px; margin: 0 }} "
                    "html { print-color-adjust: exact; -webkit-print-color-adjust: exact }</style>")
            printable.write_text(_inject(page.read_text(encoding="utf-8"), size, "</head>"), encoding="utf-8")
            _chromium(browser, work, [f"--window-size={WIDTH},{height}", f"--print-to-pdf={out}",
                                      "--no-pdf-header-footer"], printable, timeout)
        if not out.exists() or out.stat().st_size == 0:
            raise ExportError(f"export {fmt}: Chromium wrote no {out.name}")
        _write_private(target, out.read_bytes())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def measure_height(page: Path, *, chromium: str, work: Path, timeout: float = 120.0) -> int:
    """The height in CSS pixels of ``page`` laid out ``WIDTH`` pixels wide."""
    probe = work / "measure.html"
    probe.write_text(_inject(page.read_text(encoding="utf-8"), _MEASURE, "</body>"), encoding="utf-8")
    dom = _chromium(chromium, work, [f"--window-size={WIDTH},800", "--dump-dom"], probe, timeout)
    found = _HEIGHT.search(dom)
    if found is None:
        raise ExportError("export: Chromium did not lay out the page (no height in its --dump-dom)")
    return max(1, int(found.group(1)))


def dump_dom(page: str | Path, *, chromium: str | None = None, timeout: float = 120.0) -> str:
    """The DOM Chromium builds from ``page`` after loading it (``--dump-dom``)."""
    browser = chromium or find_chromium()
    if browser is None:
        raise ConfigurationError(f"dump_dom: no Chromium found ({_where()})")
    work = Path(tempfile.mkdtemp(prefix="babelq-report-"))
    try:
        return _chromium(browser, work, [f"--window-size={WIDTH},800", "--dump-dom"], Path(page).resolve(),
                         timeout)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _inject(doc: str, snippet: str, before: str) -> str:
    at = doc.rfind(before)
    return doc + snippet if at < 0 else doc[:at] + snippet + doc[at:]


def _chromium(browser: str, work: Path, args: list[str], page: Path, timeout: float) -> str:
    """Run headless Chromium on ``page`` with a fresh profile in ``work``; returns its stdout."""
    command = [
        browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-extensions", "--hide-scrollbars", "--force-device-scale-factor=1", "--mute-audio",
        "--host-resolver-rules=MAP * ~NOTFOUND",  # the page is self-contained: nothing to fetch
        f"--user-data-dir={work / 'profile'}", *args, page.as_uri(),
    ]
    # its own session, so a hung Chromium and the helpers it started are stopped together
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=work,
                             start_new_session=True)
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        raise ExportError(f"export: Chromium did not finish within {timeout:.0f} s") from None
    if child.returncode != 0:
        raise ExportError(f"export: Chromium exited with code {child.returncode}: {_last_error(err)}")
    return out.decode("utf-8", "replace")


def _last_error(stderr: bytes) -> str:
    """Chromium's last stderr line that is not about the session bus (headless has none)."""
    lines = [line for line in stderr.decode("utf-8", "replace").splitlines()
             if line.strip() and "dbus" not in line.lower()]
    return lines[-1][:300] if lines else "no message"


def _write_private(target: Path, data: bytes) -> None:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)

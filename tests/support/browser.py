"""Headless Chromium for report tests: open a page, get its DOM after the script ran, its
console output, and a screenshot.

    page = open_page(Path("report.html"), screenshot=ARTIFACTS / "report.png")
    page.dom, page.console_errors, page.seconds
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"  # in .gitignore
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--enable-logging=stderr", "--v=0")


def chromium() -> str:
    """The browser's path; the test is skipped without one, unless VQA_REQUIRE_BROWSER is set
    (.ci/run sets it, and installs Debian's chromium where it is missing)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("VQA_REQUIRE_BROWSER"):
        pytest.fail("no chromium on PATH: apt-get install chromium (.ci/run does)")
    pytest.skip("no chromium on PATH (apt-get install chromium)")


@dataclass
class Page:
    dom: str
    console: list[str]  # lines Chromium logged for the page's console
    seconds: float  # wall time of the browser run: start, load, script, DOM dump

    @property
    def console_errors(self) -> list[str]:
        return [line for line in self.console if any(w in line for w in ("Uncaught", "Error", "Refused"))]


def _run(args: list[str], timeout: float) -> tuple[str, str, float]:
    with tempfile.TemporaryDirectory() as profile:
        start = time.monotonic()
        proc = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, text=True, timeout=timeout, errors="replace")
        return proc.stdout, proc.stderr, time.monotonic() - start


WINDOW = "--window-size=1280,1600"  # the screenshot's size; also the DOM dump's when asked


def open_page(path: Path, *, fragment: str = "", screenshot: Path | None = None, timeout: float = 60,
              sized: bool = False) -> Page:
    """``sized``: lay the page out in the screenshot's window for the DOM dump too, for
    tests that measure the layout (a script they add writes what it measured into the DOM)."""
    url = path.resolve().as_uri() + fragment
    dom, log, seconds = _run([*([WINDOW] if sized else []), "--dump-dom", url], timeout)
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        _run([WINDOW, f"--screenshot={screenshot}", url], timeout)
    console = [line for line in log.splitlines() if "CONSOLE" in line]
    return Page(dom, console, seconds)


class Elements(HTMLParser):
    """Counts elements by tag and class, and collects text of the cells of one class."""

    def __init__(self, text_class: str = "path"):
        super().__init__(convert_charrefs=True)
        self.tags: dict[str, int] = {}
        self.rows: list[int] = []
        self.texts: list[str] = []
        self.attrs_seen: list[tuple[str, dict]] = []
        self._text_class, self._in = text_class, False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.attrs_seen.append((tag, a))
        for cls in (a.get("class") or "").split() or [""]:
            key = f"{tag}.{cls}" if cls else tag
            self.tags[key] = self.tags.get(key, 0) + 1
        if tag == "tr" and "row" in (a.get("class") or "").split():
            self.rows.append(int(a["data-i"]))
        if tag == "td" and a.get("class") == self._text_class:
            self._in = True
            self.texts.append("")

    def handle_endtag(self, tag):
        if tag == "td":
            self._in = False

    def handle_data(self, data):
        if self._in:
            self.texts[-1] += data

    def count(self, key: str) -> int:
        return self.tags.get(key, 0)


def parse(dom: str) -> Elements:
    p = Elements()
    p.feed(dom)
    return p

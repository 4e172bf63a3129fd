"""A headless Chromium driven by Playwright, for the website's page tests.

Playwright drives the machine's own Chromium (Debian's, through `executable_path`; no browser
download). A `Page` records what a person would not see but a test must: console messages of
level error, uncaught exceptions, failed loads, and every network request the page makes (a page
read from disk must make none outside `file://`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import sync_playwright

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
# Without the background-networking flags Chromium keeps trying hosts this machine cannot reach.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--mute-audio",
]


def find_chromium() -> str | None:
    env = os.environ.get("SUITE_CHROMIUM")
    if env and Path(env).exists():
        return env
    for cand in CHROMIUM_CANDIDATES:
        if Path(cand).exists():
            return cand
    return shutil.which("chromium")


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless Chromium (a fresh profile) under Playwright."""

    def __init__(self, chromium: str | None = None, timeout_s: float = 60.0):
        exe = chromium or find_chromium()
        if exe is None:
            raise BrowserError("no Chromium found (install Debian's chromium)")
        self._pw = sync_playwright().start()
        try:
            self._browser = self._pw.chromium.launch(executable_path=exe, headless=True, args=FLAGS,
                                                     timeout=timeout_s * 1000)
        except PlaywrightError as exc:
            self._pw.stop()
            raise BrowserError(f"Chromium did not start: {exc}") from None
        self.timeout_ms = timeout_s * 1000

    def open(self, url: str, width: int = 1280, height: int = 900) -> "Page":
        context = self._browser.new_context(viewport={"width": width, "height": height})
        page = Page(context.new_page(), self.timeout_ms)
        page.goto(url)
        return page

    def close(self) -> None:
        try:
            self._browser.close()
        finally:
            self._pw.stop()

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Page:
    def __init__(self, page: Any, timeout_ms: float):
        self._page = page
        self._page.set_default_timeout(timeout_ms)
        self._errors: list[str] = []
        self._requests: list[str] = []
        page.on("console", lambda m: self._errors.append(f"console: {m.text}") if m.type in ("error", "assert")
                else None)
        page.on("pageerror", lambda e: self._errors.append(f"exception: {e}"))
        page.on("requestfailed", lambda r: self._errors.append(f"load failed: {r.url}: {r.failure}"))
        page.on("request", lambda r: self._requests.append(r.url))

    def goto(self, url: str) -> None:
        self._page.goto(url, wait_until="load")

    def eval(self, expression: str) -> Any:
        try:
            return self._page.evaluate(expression)
        except PlaywrightError as exc:
            raise BrowserError(f"evaluating {expression!r}: {exc}") from None

    def text(self) -> str:
        return self.eval("document.body.innerText")

    def console_errors(self) -> list[str]:
        """Console errors, uncaught exceptions and failed loads this page reported."""
        self.eval("0")  # let queued events arrive
        return list(self._errors)

    def requested_urls(self) -> list[str]:
        self.eval("0")
        return list(self._requests)

    def screenshot(self, path: Path, full_page: bool = True, band: tuple[int, int] | None = None) -> Path:
        """A PNG of the page: all of it, the viewport, or the vertical `band` (top, height) in CSS px."""
        path.parent.mkdir(parents=True, exist_ok=True)
        if band is not None:
            width = self.eval("document.documentElement.scrollWidth")
            self._page.screenshot(path=str(path), full_page=True,
                                  clip={"x": 0, "y": band[0], "width": width, "height": band[1]})
        else:
            self._page.screenshot(path=str(path), full_page=full_page)
        return path

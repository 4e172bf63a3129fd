#!/usr/bin/env python3
"""The first screen of every example tree's pages, as a person sees it: builds each tree's site and
takes a 1280 x 900 screenshot of its index and of each model page, before any scrolling, into
docs/screenshots/first-screen/ (JPEG at quality 55: small for the checkout, the text still sharp),
with Debian's Chromium driven by Playwright.

    .venv/bin/python tools/screenshots.py            # every tree under docs/examples
    .venv/bin/python tools/screenshots.py cpu-results
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "watchdog"), str(ROOT / "tests")]

from browser import Browser  # noqa: E402

from suite.site.publish import build_site  # noqa: E402

TREES = ("cpu-results", "gpu-results", "gpu-vllm-results", "gpu-lightning-results")
OUT = ROOT / "docs" / "screenshots" / "first-screen"


def main(argv: list[str]) -> int:
    trees = argv or list(TREES)
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, Browser() as browser:
        for tree in trees:
            site = Path(tmp) / tree
            build_site(ROOT / "docs" / "examples" / tree, site)
            for page in [site / "index.html", *sorted((site / "models").glob("*.html"))]:
                name = f"{tree}-{'index' if page.name == 'index.html' else page.stem}.jpg"
                shown = browser.open(page.as_uri(), 1280, 900)
                shown._page.screenshot(path=str(OUT / name), full_page=False, type="jpeg", quality=55)
                print(OUT / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""The first screen of every example tree's pages, as a person sees it: builds each tree's site and
takes a 1280 x 900 screenshot of its index and of each model page, before any scrolling, into
docs/screenshots/first-screen/ (JPEG at quality 55: small for the checkout, the text still sharp),
with Debian's Chromium driven by Playwright. Beside them, `manifest.json` names each screenshot's
tree and the digest of that tree's records when it was taken: a test compares it with the records
now, so a screenshot of records that changed since is found stale.

    .venv/bin/python tools/screenshots.py            # every tree under docs/examples
    .venv/bin/python tools/screenshots.py cpu-results
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "watchdog"), str(ROOT / "tests")]

from browser import Browser  # noqa: E402

from suite.site.publish import build_site  # noqa: E402

TREES = ("cpu-results", "gpu-results", "gpu-vllm-results", "gpu-lightning-results")
OUT = ROOT / "docs" / "screenshots" / "first-screen"


def records_digest(tree: Path) -> str:
    """The digest of an example tree's records: every file's path and content, in path order."""
    h = hashlib.sha256()
    for f in sorted(p for p in tree.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(tree)).encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def main(argv: list[str]) -> int:
    trees = argv or list(TREES)
    OUT.mkdir(parents=True, exist_ok=True)
    manifest_path = OUT / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    with tempfile.TemporaryDirectory() as tmp, Browser() as browser:
        for tree in trees:
            site = Path(tmp) / tree
            build_site(ROOT / "docs" / "examples" / tree, site)
            for page in [site / "index.html", *sorted((site / "models").glob("*.html"))]:
                name = f"{tree}-{'index' if page.name == 'index.html' else page.stem}.jpg"
                shown = browser.open(page.as_uri(), 1280, 900)
                shown._page.screenshot(path=str(OUT / name), full_page=False, type="jpeg", quality=55)
                manifest[name] = {"tree": tree, "records": records_digest(ROOT / "docs" / "examples" / tree)}
                print(OUT / name)
    manifest_path.write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

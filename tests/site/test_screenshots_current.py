"""The README's screenshots are of the example trees as they are: every tree's index and model
pages has one, and each was taken from the records the tree holds now (tools/screenshots.py writes
the records' digest beside them; run it again after the example records change)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from suite.site.figures import load_runs

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "docs" / "screenshots" / "first-screen"


def _tool():  # tools/ is not a package: the script itself, loaded by path
    spec = importlib.util.spec_from_file_location("screenshots", ROOT / "tools" / "screenshots.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_example_page_has_a_screenshot_of_the_records_it_shows_now() -> None:
    tool = _tool()
    manifest = json.loads((SHOTS / "manifest.json").read_text())
    stale = []
    for tree in tool.TREES:
        folder = ROOT / "docs" / "examples" / tree
        pages = ["index", *load_runs(folder)]
        digest = tool.records_digest(folder)
        for page in pages:
            name = f"{tree}-{page}.jpg"
            assert (SHOTS / name).is_file(), f"{name}: no screenshot (tools/screenshots.py {tree})"
            if manifest.get(name, {}).get("records") != digest:
                stale.append(name)
    assert not stale, f"screenshots of records that changed since: {stale} (run tools/screenshots.py)"
    # every example tree is one the tool takes
    assert {p.name for p in (ROOT / "docs" / "examples").iterdir() if p.is_dir() and any(p.iterdir())} \
        <= set(tool.TREES) | {"gpu-run"}

"""docs/ARCHITECTURE.md names only files and folders that exist: every path in backticks (one with
a "/", or a file name ending in .py, .toml, .md or .html) is found in the repository, from its root
or, for a module of the suite, from `suite/` (as the page says). A `<name>` or `*` in a path
stands for any name: some file or folder must match it."""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "ARCHITECTURE.md"
FILE_NAME = re.compile(r"\.(py|toml|md|html)$")
SKIPPED = {".git", ".venv", "node_modules", "__pycache__"}


def path_tokens(text: str) -> list[str]:
    """The path-like words of the page's inline code spans, in order, each once."""
    found: list[str] = []
    for span in re.findall(r"`([^`\n]+)`", text):
        for word in span.split():
            if ("/" in word or FILE_NAME.search(word)) and not word.startswith(("http:", "https:")) \
                    and word not in found:
                found.append(word)
    return found


def exists(token: str) -> bool:
    pattern = re.sub(r"<[^>]+>", "*", token).rstrip("/")
    if "/" not in pattern:  # a file name the page gives within its package: some file has it
        for _folder, subfolders, files in os.walk(REPO):
            subfolders[:] = [d for d in subfolders if d not in SKIPPED and not d.startswith(".")]
            if any(fnmatch.fnmatch(f, pattern) for f in files + subfolders):
                return True
        return False
    return any(next(root.glob(pattern), None) is not None for root in (REPO, REPO / "suite"))


def test_the_page_names_paths() -> None:
    tokens = path_tokens(DOC.read_text())
    assert len(tokens) > 20 and {"tools/import_layers.py", "suite/stages/__init__.py", "cli.py"} <= set(tokens)


def test_every_path_the_architecture_page_names_exists() -> None:
    missing = [t for t in path_tokens(DOC.read_text()) if not exists(t)]
    assert not missing, f"{DOC.relative_to(REPO)} names paths that do not exist: {', '.join(missing)}"


def test_a_path_that_does_not_exist_is_caught() -> None:
    tokens = path_tokens("see `suite/nowhere.py`, `bench/runner.py`, `images/<name>/runtime.toml` and `cli.py`")
    assert tokens == ["suite/nowhere.py", "bench/runner.py", "images/<name>/runtime.toml", "cli.py"]
    assert [exists(t) for t in tokens] == [False, True, True, True]

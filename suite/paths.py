"""Where the suite keeps things: the cache (runtimes, models, tools) and the results folder.

`SUITE_CACHE` overrides the cache folder (default: the user's cache directory / suite);
`RESULTS` overrides the results folder (default: ./results); `SITE_OUT` the generated site's folder
(default: site/public).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

REPO_ROOT = Path(__file__).resolve().parent.parent
IMAGES_DIR = REPO_ROOT / "images"
PROMPTS_DIR = REPO_ROOT / "prompts"
EXTRACTION_DIR = PROMPTS_DIR / "extraction"
DOCUMENTS_DIR = EXTRACTION_DIR / "documents"  # the extraction documents (and the random weights' text)
SITE_DIR = REPO_ROOT / "site"
CARDS_DIR = Path(__file__).resolve().parent / "cards"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# What a file the suite writes through a temporary name gets: the mode any file the user creates
# gets (a temporary file's own, 0600, would leave a results folder that is shared or served
# unreadable to everyone but its writer).
FILE_MODE = 0o666 & ~_umask()


def cache_dir() -> Path:
    env = os.environ.get("SUITE_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "suite"


def runtime_prefix(runtime: str) -> Path:
    """Install folder of a runtime's local build or venv."""
    return cache_dir() / "runtimes" / runtime


def leases_dir() -> Path:
    """One file per running local runtime (pid, start time, owner); stale ones are ended."""
    return cache_dir() / "leases"


def models_dir() -> Path:
    return cache_dir() / "models"


def tools_prefix() -> Path:
    """Venv with the model-preparation tools (torch, transformers, gguf, peft)."""
    return cache_dir() / "tools"


def results_dir() -> Path:
    return Path(os.environ.get("RESULTS") or "results").resolve()


# What the file system takes: a path of at most PATH_MAX bytes, each of its parts at most NAME_MAX
# (Linux's limits; other systems' are no smaller for the paths the suite writes).
NAME_MAX = 255
PATH_MAX = 4095


def path_problem(text: str) -> str | None:
    """What keeps `text`, given on the command line, from being a path the suite can look at:
    empty (it would name the current folder), a NUL, a part over NAME_MAX bytes or the whole over
    PATH_MAX (the file system's "name too long"). None: it can be looked at."""
    if not text:
        return "empty; give a folder"
    if "\0" in text:
        return "holds a NUL character"
    size = len(os.fsencode(text))
    if size > PATH_MAX:
        return f"{size} bytes; a path has at most {PATH_MAX}"
    longest = max((len(os.fsencode(part)) for part in text.split(os.sep)), default=0)
    if longest > NAME_MAX:
        return f"a part of {longest} bytes; a file name has at most {NAME_MAX}"
    return None


def site_out_dir() -> Path:
    """Where `suite site` and `suite bench --site` write the website."""
    return Path(os.environ.get("SITE_OUT") or SITE_DIR / "public").resolve()


def open_lock(path: Path) -> IO[str]:
    """A lock or owner file, opened to read and write and created where missing, never through a
    symbolic link (O_NOFOLLOW): a link planted in its place is an OSError (ELOOP), never a file
    elsewhere opened, locked or truncated. Nothing in it is truncated on opening."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    return os.fdopen(fd, "r+", encoding="utf-8")

"""Where a file or a model came from, as hashes: files and the prompt set by SHA-256, and a model
revision resolved to the commit it named (from the download's own metadata where offline)."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from suite.paths import PROMPTS_DIR

# Commit ids: a revision that already is one needs no resolving.


COMMIT = re.compile(r"^[0-9a-f]{40}$")


def resolve_revision(source: str, revision: str | None, local_dir: Path | None = None,
                     online: bool = True) -> tuple[str | None, bool | None]:
    """(commit, resolved) for a model format's revision.

    Only `hf:` sources have revisions to resolve: a 40-hex revision is its own commit; else the
    commit `snapshot_download` wrote beside the prepared files
    (`<local_dir>/.cache/huggingface/download/*.metadata`, first line), else, when `online`,
    huggingface_hub's `model_info` (skipped under HF_HUB_OFFLINE). Without huggingface_hub, or
    when nothing answers, the revision stays as given: (None, False). Other sources: (None, None).
    """
    if not source.startswith("hf:"):
        return None, None
    rev = revision or "main"
    if COMMIT.match(rev):
        return rev, True
    if local_dir is not None:
        commit = _commit_from_download_metadata(local_dir)
        if commit:
            return commit, True
    if not online or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return None, False
    try:
        from huggingface_hub import HfApi  # optional: only for real checkpoints
    except ImportError:
        return None, False
    try:
        info = HfApi().model_info(source[3:], revision=rev, timeout=20)
    except Exception:  # network, auth, unknown revision: keep it as given
        return None, False
    sha = getattr(info, "sha", None)
    return (sha, True) if isinstance(sha, str) and COMMIT.match(sha) else (None, False)


def _commit_from_download_metadata(local_dir: Path) -> str | None:
    """The commit huggingface_hub recorded for the files it downloaded into `local_dir`, if one."""
    meta = local_dir / ".cache" / "huggingface" / "download"
    commits: set[str] = set()
    try:
        for p in meta.rglob("*.metadata"):
            first = p.read_text(errors="replace").splitlines()[:1]
            if first and COMMIT.match(first[0].strip()):
                commits.add(first[0].strip())
    except OSError:
        return None
    return commits.pop() if len(commits) == 1 else None


def hash_files(paths: list[Path]) -> str:
    """SHA-256 over files' names and contents (prompt sets), order-independent."""
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def prompt_set_hash() -> str:
    """SHA-256 over every file of the prompt sets (gate prompts, extraction documents, rubric)."""
    return hash_files([p for p in PROMPTS_DIR.rglob("*") if p.is_file()])

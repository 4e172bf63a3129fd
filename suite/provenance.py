"""Which code of the suite wrote a record: its version, its git commit and whether the tree was modified.

`suite --version` prints it and every new run record keeps it (`suite` beside the signature, in
run.json and summary.json). The commit is never part of the signature's digest: the same
configuration keeps its signature across commits of the suite (the version is in the signature,
as it always was), and `suite compare` and the pages name the commit beside it.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from pydantic import BaseModel, Field

import suite

ROOT = Path(__file__).resolve().parents[1]


class SuiteBuild(BaseModel):
    """The suite's code that wrote a record."""

    version: str = Field(description="the suite's version (suite.__version__)")
    commit: str | None = Field(default=None, description="the git commit of the suite's code; None: not a git checkout")
    modified: bool | None = Field(default=None, description="tracked files differed from that commit (uncommitted "
                                                            "changes); None: unknown")

    def text(self) -> str:
        """`0.1.0 (commit 1a2b3c..., tree modified)`, as `suite --version` prints it after `suite `."""
        if self.commit is None:
            return f"{self.version} (commit unknown: not a git checkout)"
        return f"{self.version} (commit {self.commit}{', tree modified' if self.modified else ''})"


def _git(*args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def suite_build() -> SuiteBuild:
    """This process's suite: its version, and its commit and tree state where its folder is a git
    checkout (asked once per process)."""
    head = _git("rev-parse", "HEAD")
    if head is None or not (ROOT / ".git").exists():
        return SuiteBuild(version=suite.__version__)
    status = _git("status", "--porcelain", "--untracked-files=no")
    return SuiteBuild(version=suite.__version__, commit=head.strip(),
                      modified=None if status is None else bool(status.strip()))

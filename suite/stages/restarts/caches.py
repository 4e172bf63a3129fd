"""The restarts stage's compile caches as the record half knows them, none of it starting a runtime:
the environment that points every cache the runtime declares under one root (`cache_env`), the
files each holds before a launch (`files_in`, `cache_counts`) and the log line by which a runtime
says it found a cache and did not use it (`cache_not_loaded`). `suite.stages.restarts.run` makes
the launches that use them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from suite.secrets import scrub

if TYPE_CHECKING:
    from suite.definitions import CompileCacheSpec


def cache_env(root: Path, caches: CompileCacheSpec) -> dict[str, str]:
    """The env that points every compile/autotune cache the runtime declares under `root`, with
    its settings (vLLM's: Triton keeps its autotuning choices with its kernels)."""
    return caches.env_under(root)


def files_in(root: Path) -> int:
    return sum(1 for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def cache_counts(root: Path, caches: CompileCacheSpec) -> dict[str, int]:
    """Files in each declared compile cache under `root` (triton, inductor, ...), before a launch starts."""
    return {d.folder: files_in(root / d.folder) for d in caches.dirs}


def cache_not_loaded(log_path: Path | None, patterns: list[str]) -> str | None:
    """The first line of a launch's log by which the runtime says it found a compile cache and did not
    use it (one of `patterns`), cut to 300 characters and scrubbed of secrets; None when none says so."""
    if not patterns or log_path is None or not Path(log_path).is_file():
        return None
    compiled = [re.compile(p) for p in patterns]
    with Path(log_path).open(errors="replace") as fh:
        for line in fh:
            found = next((m for m in (c.search(line) for c in compiled) if m), None)
            if found is not None:
                said = scrub(line[found.start():].strip())  # from the runtime's words on, not its log prefix
                # its start and its end (where the reason is), a long path between them cut
                return said if len(said) <= 300 else f"{said[:80]} … {said[-200:]}"
    return None

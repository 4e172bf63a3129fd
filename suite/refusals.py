"""Determinism modes a runtime refused on this machine, remembered so that the next bench does not
pay for the same refusal again.

A bench starts a runtime in its determinism mode first (vLLM: batch-invariant) and falls back to
its default mode when that start is refused. vLLM's CPU build takes about a minute to refuse
batch-invariant mode, every bench. The refusal is kept in `refusals.json` of the suite cache under
a key of everything that decides it: the launcher, the runtime and its control, what is installed
(the install marker's text and time, or the image), the launch's env and args, the model, the
context, and this machine's CPU (model and instruction-set flags) and GPU. A bench that finds its
key there does not start the mode again: the run records the refusal as before, with when and in
which run it was seen (`DeterminismOutcome.known_from`); `suite bench --retry-refused` tries it
again (and forgets the refusal if the mode now starts). Anything in the key that changes (an
upgrade, a new control, another CPU) is another key: the mode is tried afresh.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from suite.paths import FILE_MODE, cache_dir

if TYPE_CHECKING:
    from suite.launchers.base import Launcher, LaunchSpec

log = logging.getLogger(__name__)


class KnownRefusal(BaseModel):
    """One remembered refusal: its error line, and when and in which run it was seen."""

    runtime: str
    control: str
    outcome: str  # refused | failed
    error_line: str | None = None
    seen_at: str
    run_id: str | None = None


def _path() -> Path:
    return cache_dir() / "refusals.json"


def _cpu_flags() -> str:
    """This CPU's model name and instruction-set flags (the kernels a runtime picks depend on them)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return ""
    lines = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags"))]
    return "\n".join(dict.fromkeys(lines))  # one of each: every core says the same


def _installed(spec: LaunchSpec) -> str:
    """What is installed of the runtime: the local install marker's text and time, or the image."""
    definition = spec.runtime
    parts: list[str] = []
    if definition.local is not None:
        from suite.launchers.local import install_prefix

        marker = install_prefix(definition) / definition.local.installed_marker
        try:
            parts.append(f"{marker}:{marker.stat().st_mtime_ns}:{marker.read_text(errors='replace')}")
        except OSError:
            parts.append(f"{marker}: absent")
    if definition.docker is not None:
        parts.append(definition.docker.model_dump_json())
    parts.append(f"pinned={definition.pinned_version}")
    return "\n".join(parts)


def refusal_key(launcher: Launcher, spec: LaunchSpec, control: str) -> str:
    """The key of one determinism-mode start: everything that decides whether it is refused."""
    from suite.probes import detect_hardware

    hw = detect_hardware()
    what = {
        "launcher": launcher.name, "runtime": spec.runtime.name, "control": control,
        "installed": _installed(spec), "env": sorted(spec.env.items()), "args": list(spec.args),
        "model": str(spec.model_path), "context": spec.context_length, "seed": spec.seed,
        "cpu": _cpu_flags(), "gpu": [hw.gpu, hw.gpu_driver, hw.cuda],
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def _load() -> dict[str, KnownRefusal]:
    try:
        raw = json.loads(_path().read_text(encoding="utf-8"))
        return {k: KnownRefusal.model_validate(v) for k, v in raw.items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, TypeError, AttributeError) as exc:  # unreadable: tried afresh, and rewritten
        log.warning("%s: unreadable (%s); determinism modes are tried afresh", _path(), exc)
        return {}


def known(key: str) -> KnownRefusal | None:
    """The refusal remembered under `key`, if any."""
    return _load().get(key)


def _save(entries: dict[str, KnownRefusal]) -> None:
    path = _path()
    path.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({k: v.model_dump() for k, v in entries.items()}, indent=1, sort_keys=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".refusals-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), FILE_MODE)
        f.write(body)
    os.replace(tmp, path)


def remember(key: str, refusal: KnownRefusal) -> None:
    """Keep a refusal under its key (a later bench of the same configuration skips the start)."""
    entries = _load()
    entries[key] = refusal
    try:
        _save(entries)
    except OSError as exc:  # a cache that cannot be written costs time, never a result
        log.warning("%s: not written (%s)", _path(), exc)


def forget(key: str) -> None:
    """Drop a refusal (the mode started after all)."""
    entries = _load()
    if entries.pop(key, None) is not None:
        try:
            _save(entries)
        except OSError as exc:
            log.warning("%s: not written (%s)", _path(), exc)

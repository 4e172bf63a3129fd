"""How an arm's runtime failed, as the run record keeps it, and the errors that end an arm.

`failure_at_start`: a runtime that never got ready (refused, timed out, exited, killed by a
signal), with its error line and its log's tail; `failure_in_stage`: one that ended on its own
during a stage. `RuntimeDied` and `WatchdogTripped` end an arm's stages (a result, not a crash).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from suite.errors import RuntimeStartError, SuiteError
from suite.launchers.base import RunningRuntime
from suite.records import RuntimeFailure

TAIL_LINES = 20


def _relative(path: Path | str | None, run_dir: Path) -> str | None:
    if path is None:
        return None
    try:
        return Path(path).resolve().relative_to(run_dir.resolve()).as_posix()
    except ValueError:
        return None


def _secrets_of(rt: RunningRuntime) -> tuple[str, ...]:
    return (rt.api_key,) if rt.api_key else ()


def failure_at_start(exc: RuntimeStartError, log_path: Path | None, run_dir: Path) -> RuntimeFailure:
    """A runtime that never got ready: how it failed, its error line and its log's tail."""
    from suite.launchers.base import exit_signal, log_tail

    after = exc.after_s
    signal_name = exit_signal(exc.returncode) if exc.returncode is not None else (
        (re.search(r"\bSIG[A-Z0-9]+\b", exc.ended or "") or [None])[0])
    if exc.refused:
        cause, what = "refused", "refused to start"
    elif exc.timed_out:
        cause, what = "timeout", f"not ready after {after or 0:.0f} s"
    elif exc.ended:
        cause = "signal" if signal_name else ("exit" if "exited with status" in exc.ended else "gone")
        what = exc.ended + (f" {after:.1f} s after start" if after is not None else " at start")
    else:
        cause, what = "gone", str(exc)
    status = exc.returncode if exc.returncode is not None and exc.returncode >= 0 else None
    return RuntimeFailure(what=what, cause=cause, signal=signal_name, exit_status=status,
                          after_s=None if after is None else round(after, 2), error_line=exc.error_line,
                          log_tail=log_tail(log_path, TAIL_LINES), log_file=_relative(log_path, run_dir))


def failure_in_stage(rt: RunningRuntime, where: str, stage: str, done: int | None, planned: int | None,
                     run_dir: Path) -> RuntimeFailure:
    """The arm's runtime ended on its own during (or before) a stage."""
    from suite.launchers.base import exit_signal, find_error_line, log_tail

    code = rt.exit_code()
    ended = rt.ended()
    signal_name = exit_signal(code) if code is not None else (
        (re.search(r"\bSIG[A-Z0-9]+\b", ended or "") or [None])[0])
    try:
        line = find_error_line(Path(rt.log_path).read_text(errors="replace"))
    except (OSError, TypeError):
        line = None
    cause = "signal" if signal_name else ("exit" if ended and "exited with status" in ended else "gone")
    return RuntimeFailure(what=f"{ended or 'stopped'} {where}", cause=cause, signal=signal_name,
                          exit_status=code if code is not None and code >= 0 else None, stage=stage,
                          requests_done=done, requests_planned=planned, error_line=line,
                          log_tail=log_tail(getattr(rt, "log_path", None), TAIL_LINES, _secrets_of(rt)),
                          log_file=_relative(getattr(rt, "log_path", None), run_dir))



class RuntimeDied(SuiteError):
    """The arm's runtime stopped on its own during a stage that needed it."""


class WatchdogTripped(SuiteError):
    def __init__(self, report: Any):
        super().__init__("stopped by the memory watchdog")
        self.report = report


"""What the suite shows while it works: progress of every long step, on a terminal or in a log.

Two kinds of progress, both from here:

- a *step*: something long with no count (a runtime install, an image build, a model download
  or derivation, a runtime's start-up wait). `step(name)` is a context manager; on a terminal it
  is a spinner with the elapsed time and either the time limit (`timeout_s`) or the latest line
  of the step's output (`Step.note`, or `Step.follow` for a subprocess writing a log file).
- a *stage*: a loop of requests. `stage(name, total)` is a context manager; every request the
  stage records calls `advance()` (through `StageContext.record_request`), from any thread. On a
  terminal it is a bar with the count, the rate and the time left; without a total (a count not
  known in advance), the count and the rate only.

On a terminal, the running steps and stages are drawn live below the output, and each one
leaves one line when it ends ("✓ install llamacpp: done in 259 s"). When the display's stream
is not a terminal (a CI log, a pipe) or `CI` is set, it prints plain lines instead: one when a
step or stage starts, one when it ends ("install llamacpp: started", "install llamacpp: done in
259 s"), and for a stage one line at most every 10 % of its total or every 30 s (and not two
within 5 s), never one per request.

The display writes to stderr (stdout stays the commands' own output). `DISPLAY` is the one
process-wide display; the module's functions (`step`, `stage`, `advance`, `console`) use it. A
log handler that writes while a live display is drawn must write through `console()`, so that
its lines appear above the display instead of through it.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, Task, TaskID, TextColumn
from rich.table import Table
from rich.text import Text

from suite.sanitize import SafeConsole

LINE_EVERY_FRACTION = 0.10  # plain output: a stage's progress line at most every 10 % of its total ...
LINE_EVERY_S = 30.0  # ... or every 30 s
LINE_GAP_S = 5.0  # ... and never two within 5 s (a short stage: its start and end lines only)
NOTE_CHARS = 80  # a step's latest output line, cut to this many characters
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")


def format_duration(seconds: float) -> str:
    """`3.2 s`, `259 s`: tenths below ten seconds, whole seconds above."""
    return f"{seconds:.1f} s" if round(seconds, 1) < 10 else f"{seconds:.0f} s"


def last_line(text: str) -> str:
    """The last non-empty line of some output (progress bars' carriage returns split lines too),
    without terminal escapes, cut to NOTE_CHARS."""
    for line in reversed(re.split(r"[\r\n]+", _ANSI.sub("", text))):
        line = line.strip()
        if line:
            return line if len(line) <= NOTE_CHARS else line[:NOTE_CHARS - 1] + "…"
    return ""


def tail_of(path: Path, size: int = 4096) -> str:
    """The last line of a log file that is still being written ("" when it has none yet)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            end = fh.tell()
            fh.seek(max(0, end - size))
            return last_line(fh.read().decode("utf-8", errors="replace"))
    except OSError:
        return ""


# -- the live display's columns ---------------------------------------------------------------------

class _BarColumn(BarColumn):
    """A stage's bar (pulsing without a total); nothing for a step."""

    # rich draws whatever renderable a column gives; its types say a bar column gives only a bar
    def render(self, task: Task) -> Text:  # type: ignore[override]
        if task.fields.get("kind") != "stage":
            return Text("")
        return super().render(task)  # type: ignore[return-value]


class _CountColumn(ProgressColumn):
    """`12/40 requests, 1.5/s` (with failures: `(2 failed)`); a step shows nothing here."""

    def render(self, task: Task) -> Text:
        if task.fields.get("kind") != "stage":
            return Text("")
        done = int(task.completed)
        text = f"{done}/{int(task.total)}" if task.total is not None else str(done)
        text += " requests"
        failed = task.fields.get("failed", 0)
        if failed:
            text += f" ({failed} failed)"
        if task.speed:
            text += f", {task.speed:.1f}/s"
        return Text(text)


class _ElapsedColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        return Text(format_duration(task.elapsed or 0.0), style="progress.elapsed")


class _TailColumn(ProgressColumn):
    """A stage's time left (with a total); a step's time limit and its latest output line."""

    def render(self, task: Task) -> Text:
        if task.fields.get("kind") == "stage":
            remaining = task.time_remaining
            if task.total is None or remaining is None:
                return Text("")
            return Text(f"ETA {format_duration(remaining)}", style="progress.remaining")
        parts = []
        if task.fields.get("timeout_s"):
            parts.append(f"of at most {format_duration(task.fields['timeout_s'])}")
        if task.fields.get("note"):
            parts.append(task.fields["note"])
        return Text("  ".join(parts), style="dim", no_wrap=True, overflow="ellipsis")


# -- steps and stages -----------------------------------------------------------------------------

@dataclass
class Step:
    """One running step: its name, when it started, and its latest output line."""

    name: str
    display: Display
    started: float
    timeout_s: float | None = None
    task: TaskID | None = None
    note_text: str = ""

    @property
    def elapsed_s(self) -> float:
        return self.display.clock() - self.started

    def note(self, text: str) -> None:
        """The step's latest output line (shown beside its spinner on a terminal)."""
        line = last_line(text)
        if line and line != self.note_text:
            self.note_text = line
            self.display._update_note(self, line)

    def follow(self, proc: subprocess.Popen, log_path: Path, poll_s: float = 0.5) -> int:
        """Wait for a subprocess that writes its output to `log_path`, showing the log's latest
        line as it goes; its exit status. On an exception (Ctrl-C) the subprocess is killed."""
        try:
            while True:
                try:
                    return proc.wait(timeout=poll_s)
                except subprocess.TimeoutExpired:
                    self.note(tail_of(log_path))
        except BaseException:
            proc.kill()
            proc.wait()
            raise


@dataclass
class Counter:
    """One running stage: its requests so far (thread-safe), of `total` when it is known."""

    name: str
    display: Display
    started: float
    total: int | None = None
    completed: int = 0
    failed: int = 0
    task: TaskID | None = None
    _lines_at: tuple[float, int] = (0.0, 0)  # plain output: when the last progress line was, at which count
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def elapsed_s(self) -> float:
        return self.display.clock() - self.started

    def advance(self, n: int = 1, *, failed: bool = False) -> None:
        """`n` more requests answered (or failed); safe from any thread."""
        with self._lock:
            self.completed += n
            self.failed += n if failed else 0
            if self.total is not None and self.completed > self.total:
                self.total = self.completed  # more than planned (a judge's requests): the bar stays honest
            line = self._progress_line()
        self.display._advanced(self, line)

    def _progress_line(self) -> str | None:
        """Plain output: the progress line due now, if one is (called under the lock)."""
        if self.display.interactive_now is not False:
            return None
        now = self.display.clock()
        last_t, last_n = self._lines_at
        if self.total:
            step = max(1, int(self.total * LINE_EVERY_FRACTION + 0.999))
            due = self.completed - last_n >= step and self.completed < self.total
        else:
            due = False
        since = now - max(last_t, self.started)
        due = due or (since >= LINE_EVERY_S and self.completed > last_n)
        if not due or since < LINE_GAP_S:
            return None
        self._lines_at = (now, self.completed)
        return f"{self.name}: {self.summary()}"

    def summary(self, final: bool = False) -> str:
        """`40/200 requests (20 %), 2 failed, 1.5/s, 27 s, ETA 107 s`."""
        elapsed = self.elapsed_s
        if self.total and not final:
            text = f"{self.completed}/{self.total} requests ({100 * self.completed // self.total} %)"
        else:
            text = f"{self.completed} requests"
        if self.failed:
            text += f", {self.failed} failed"
        rate = self.completed / elapsed if elapsed > 0 else 0.0
        if rate > 0:
            text += f", {rate:.1f}/s"
        if final:
            return text
        text += f", {format_duration(elapsed)}"
        if self.total and rate > 0 and self.completed < self.total:
            text += f", ETA {format_duration((self.total - self.completed) / rate)}"
        return text


class Display:
    """The suite's progress display: live on a terminal, plain lines otherwise. Thread-safe.

    `interactive`: None (the default) decides when each step starts: live when the console is
    a terminal (not a dumb one) and `CI` is not set. `clock` is the time source (for tests)."""

    def __init__(self, console: Console | None = None, *, interactive: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, refresh_per_second: float = 4.0):
        self.console = console or SafeConsole(stderr=True)
        self.clock = clock
        self._interactive = interactive
        self._refresh = refresh_per_second
        self._lock = threading.RLock()
        self._progress: Progress | None = None  # the live display while a step or stage runs on a terminal
        self._running: list[Step | Counter] = []
        self._stages: list[Counter] = []  # the stages now running, innermost last
        self.interactive_now: bool | None = None  # the mode of the steps now running

    # -- mode -----------------------------------------------------------------------------------

    def is_interactive(self) -> bool:
        """Live display (a terminal, not a CI log or a pipe)?"""
        if self._interactive is not None:
            return self._interactive
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            return False
        return bool(self.console.is_terminal and not self.console.is_dumb_terminal)

    def _print(self, line: str, style: str | None = None) -> None:
        if style is None:
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            self.console.print(f"[{style}]{escape(line)}[/]", highlight=False, soft_wrap=True)

    def _begin(self, item: Step | Counter, plain_line: str, fields: dict) -> None:
        with self._lock:
            if not self._running:
                self.interactive_now = self.is_interactive()
            self._running.append(item)
            if not self.interactive_now:
                self._print(plain_line)
                return
            if self._progress is None:
                self._progress = Progress(
                    SpinnerColumn(), TextColumn("{task.description}"), _BarColumn(bar_width=30), _CountColumn(),
                    _ElapsedColumn(), _TailColumn(), console=self.console, transient=True,
                    refresh_per_second=self._refresh, speed_estimate_period=60.0)
                try:
                    self._progress.start()
                except Exception:  # noqa: BLE001 - another live display on this console: plain lines
                    self._progress = None
                    self.interactive_now = False
                    self._print(plain_line)
                    return
            item.task = self._progress.add_task(escape(item.name), total=fields.pop("total", None), **fields)

    def _end(self, item: Step | Counter, line: str, ok: bool) -> None:
        with self._lock:
            if item in self._running:
                self._running.remove(item)
            live = self._progress
            if live is not None and item.task is not None:
                live.remove_task(item.task)
                if self._running:
                    live.refresh()  # else the line below is printed above a display that still has this row
                else:
                    live.stop()  # nothing left to draw: the display goes, the line stays
                    self._progress = None
                self.console.print(f"[{'green' if ok else 'red'}]{'✓' if ok else '✗'}[/] {escape(line)}",
                                   highlight=False, soft_wrap=True)
            else:
                self._print(line)
            if not self._running:
                if self._progress is not None:
                    self._progress.stop()
                    self._progress = None
                self.interactive_now = None

    def _update_note(self, item: Step | Counter, note: str) -> None:
        with self._lock:
            if self._progress is not None and item.task is not None:
                self._progress.update(item.task, note=note)

    def _advanced(self, counter: Counter, line: str | None) -> None:
        with self._lock:
            if self._progress is not None and counter.task is not None:
                self._progress.update(counter.task, completed=counter.completed, total=counter.total,
                                      failed=counter.failed)
            elif line is not None:
                self._print(line)

    def refresh(self) -> None:
        """Draw the live display now (it also redraws by itself, a few times a second)."""
        with self._lock:
            if self._progress is not None:
                self._progress.refresh()

    # -- the calls ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def step(self, name: str, *, timeout_s: float | None = None, detail: str | None = None,
             live: bool = True) -> Iterator[Step]:
        """A long step without a count: a spinner with the elapsed time (and `timeout_s`, the
        most it may take), or a line when it starts and one when it ends.

        `detail` is added to the plain start line (e.g. where the full log is). `live=False`:
        no spinner, a start and an end line on a terminal too, for a step that draws its own
        progress bars (a download)."""
        item = Step(name=name, display=self, started=self.clock(), timeout_s=timeout_s)
        extra = [x for x in (detail, f"at most {format_duration(timeout_s)}" if timeout_s else None) if x]
        start_line = f"{name}: started" + (f" ({', '.join(extra)})" if extra else "")
        if live:
            self._begin(item, start_line, {"kind": "step", "timeout_s": timeout_s, "note": ""})
        else:
            with self._lock:
                self._print(start_line)

        def finish(line: str, ok: bool) -> None:
            if live:
                self._end(item, line, ok)
            else:
                with self._lock:
                    self._print(line)

        with _ending(name, item, finish):
            yield item

    @contextlib.contextmanager
    def stage(self, name: str, total: int | None = None) -> Iterator[Counter]:
        """A loop of requests: `advance()` once per request (from any thread) while it runs.
        `total`: the requests it will send, when known (for the bar and the time left)."""
        item = Counter(name=name, display=self, started=self.clock(), total=total or None)
        planned = f" ({item.total} requests)" if item.total else ""
        self._begin(item, f"{name}: started{planned}", {"kind": "stage", "total": item.total, "failed": 0})
        with self._lock:
            self._stages.append(item)

        def finish(line: str, ok: bool) -> None:
            with self._lock:
                if item in self._stages:
                    self._stages.remove(item)
            self._end(item, f"{line} ({item.summary(final=True)})", ok)

        with _ending(name, item, finish):
            yield item

    def advance(self, n: int = 1, *, failed: bool = False) -> None:
        """One more request of the stage now running (the innermost); nothing when none runs."""
        with self._lock:
            counter = self._stages[-1] if self._stages else None
        if counter is not None:
            counter.advance(n, failed=failed)


@contextlib.contextmanager
def _ending(name: str, item: Any, finish: Callable[[str, bool], None]) -> Iterator[None]:
    """Runs the block, then gives `finish` its end line ("done in 3.1 s", "failed after 3.1 s",
    "interrupted after 3.1 s") and whether it ended well; Ctrl-C and errors go on up."""
    outcome: Literal["done", "failed", "interrupted"] = "failed"
    try:
        yield
        outcome = "done"
    except KeyboardInterrupt:
        outcome = "interrupted"
        raise
    finally:
        took = format_duration(item.elapsed_s)
        finish(f"{name}: done in {took}" if outcome == "done" else f"{name}: {outcome} after {took}", outcome == "done")


# The one process-wide display (on stderr); the functions below use it.
DISPLAY = Display()


def step(name: str, *, timeout_s: float | None = None, detail: str | None = None,
         live: bool = True) -> contextlib.AbstractContextManager[Step]:
    """`DISPLAY.step`: a long step without a count (an install, a build, a download, a start-up wait)."""
    return DISPLAY.step(name, timeout_s=timeout_s, detail=detail, live=live)


def stage(name: str, total: int | None = None) -> contextlib.AbstractContextManager[Counter]:
    """`DISPLAY.stage`: a stage's requests, `total` when known."""
    return DISPLAY.stage(name, total)


def advance(n: int = 1, *, failed: bool = False) -> None:
    """`DISPLAY.advance`: one more request of the stage now running."""
    DISPLAY.advance(n, failed=failed)


def console() -> Console:
    """The display's console: log handlers write through it, so that their lines appear above a live display."""
    return DISPLAY.console


def interactive() -> bool:
    """Whether the display is live (a terminal), or prints plain lines (a CI log, a pipe)."""
    return DISPLAY.is_interactive()


class PlainTable(Table):
    """A rich Table whose string cells are shown as they are, never parsed as markup: a path, a
    control name or a runtime's line holding `[/INST]` is data (a plain Table would raise)."""

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        super().add_row(*[Text(r) if isinstance(r, str) else r for r in renderables], **kwargs)


def cells(*values: object) -> list[Text]:
    """Table cells that show their text as it is: a rich Table parses a plain string cell as markup,
    so a failure reason holding `[/INST]` would raise MarkupError and `[bold]` would vanish."""
    return [v if isinstance(v, Text) else Text("" if v is None else str(v)) for v in values]

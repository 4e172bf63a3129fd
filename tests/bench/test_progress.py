"""The progress display: live on a terminal, plain lines in a CI log or a pipe.

Plain output is one line when a step starts and one when it ends, naming the step and its
elapsed time, and for a stage of requests a bounded number of lines (every 10 % or 30 s), never
one per request. On a terminal it draws a bar with the counts. Advances from many threads (the
gate's concurrent clients) add up.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from suite import progress
from suite.errors import SuiteError
from suite.progress import Display, last_line


class Clock:
    """A time source the test moves by hand (no sleeps)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(autouse=True)
def no_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)


def plain(clock: Clock | None = None) -> tuple[Display, io.StringIO]:
    out = io.StringIO()
    return Display(Console(file=out, force_terminal=False, width=200), clock=clock or Clock()), out


def terminal() -> tuple[Display, io.StringIO]:
    out = io.StringIO()
    return Display(Console(file=out, force_terminal=True, width=150, color_system=None)), out


def lines(out: io.StringIO) -> list[str]:
    return [ln for ln in out.getvalue().splitlines() if ln.strip()]


# -- (a) not a terminal: one line per step, a bounded number per stage ----------------------------

def test_plain_output_is_one_line_when_a_step_starts_and_one_when_it_ends() -> None:
    clock = Clock()
    display, out = plain(clock)
    assert not display.is_interactive()
    with display.step("install llamacpp", detail="log: /tmp/install.log") as step:
        step.note("Collecting numpy")  # shown on a terminal only
        clock.t += 259.2
    assert lines(out) == ["install llamacpp: started (log: /tmp/install.log)", "install llamacpp: done in 259 s"]


def test_a_start_up_wait_names_its_timeout_and_a_failed_step_says_so() -> None:
    clock = Clock()
    display, out = plain(clock)
    with pytest.raises(SuiteError):
        with display.step("start llamacpp", timeout_s=600):
            clock.t += 3.25
            raise SuiteError("refused")
    assert lines(out) == ["start llamacpp: started (at most 600 s)", "start llamacpp: failed after 3.2 s"]


def test_a_200_request_stage_prints_a_bounded_number_of_lines_not_200() -> None:
    clock = Clock()
    display, out = plain(clock)
    with display.stage("gate llamacpp", total=200) as stage:
        for i in range(200):
            clock.t += 0.5
            display.advance(failed=i % 50 == 0)
    got = lines(out)
    assert stage.completed == 200 and stage.failed == 4
    assert 3 <= len(got) <= 12, got  # the start, every 10 %, the end
    assert got[0] == "gate llamacpp: started (200 requests)"
    assert all(ln.startswith("gate llamacpp: ") for ln in got)
    assert got[1] == "gate llamacpp: 20/200 requests (10 %), 1 failed, 2.0/s, 10 s, ETA 90 s"
    assert got[-1] == "gate llamacpp: done in 100 s (200 requests, 4 failed, 2.0/s)"
    middle = got[1:-1]
    assert middle and all(re.search(r"\d+/200 requests .*, \d+(\.\d)? s(, ETA|$)", ln) for ln in middle), middle


def test_a_short_stage_prints_its_start_and_end_only() -> None:
    clock = Clock()
    display, out = plain(clock)
    with display.stage("gate llamacpp", total=5) as stage:
        for _ in range(5):
            clock.t += 0.6  # 20 % a request, but all within 5 s
            stage.advance()
    assert lines(out) == ["gate llamacpp: started (5 requests)", "gate llamacpp: done in 3.0 s (5 requests, 1.7/s)"]


def test_a_slow_stage_without_a_total_prints_a_line_every_30_s() -> None:
    clock = Clock()
    display, out = plain(clock)
    with display.stage("controls llamacpp") as stage:
        for _ in range(12):
            clock.t += 10.0  # 120 s in all: a line every 30 s, not one per request
            stage.advance()
    got = lines(out)
    assert got[0] == "controls llamacpp: started"
    assert got[1:-1] == [f"controls llamacpp: {n} requests, 0.1/s, {s} s" for n, s in ((3, 30), (6, 60), (9, 90), (12, 120))]
    assert got[-1] == "controls llamacpp: done in 120 s (12 requests, 0.1/s)"


def test_ci_set_gives_plain_lines_even_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    display, out = terminal()
    assert not display.is_interactive()
    with display.step("build image suite-vllm:0123456789ab"):
        pass
    assert lines(out)[0] == "build image suite-vllm:0123456789ab: started"
    assert "\x1b[" not in out.getvalue()


def test_a_download_that_draws_its_own_bars_gets_two_lines_on_a_terminal_too() -> None:
    display, out = terminal()
    with display.step("download hf:org/model@main", live=False):
        assert display._progress is None  # nothing live to collide with huggingface_hub's bars
    assert [ln.split(" in ")[0].split(" after ")[0] for ln in lines(out)] == [
        "download hf:org/model@main: started", "download hf:org/model@main: done"]


def test_a_stage_advances_only_on_requests_not_on_fact_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    from suite.stages.base import StageContext

    display, out = plain()
    monkeypatch.setattr(progress, "DISPLAY", display)
    written: list[str] = []
    ctx = SimpleNamespace(stage="extraction", signature=SimpleNamespace(digest="d"), output_tokens={},
                          record=SimpleNamespace(record_request=lambda kind, **f: written.append(kind)))
    with display.stage("extraction llamacpp", total=2) as stage:
        StageContext.record_request(ctx, "extraction", section="s1", text="{}")  # type: ignore[arg-type]
        StageContext.record_request(ctx, "extraction-fact", section="s1", key="k")  # type: ignore[arg-type]
        StageContext.record_request(ctx, "extraction", section="s2", error="timed out")  # type: ignore[arg-type]
    assert written == ["extraction", "extraction-fact", "extraction"]
    assert (stage.completed, stage.failed) == (2, 1)
    StageContext.record_request(ctx, "gate", index=0)  # type: ignore[arg-type]  # no stage running: nothing shown
    assert lines(out)[-1].startswith("extraction llamacpp: done in")


def test_each_stage_plans_its_requests_where_it_can() -> None:
    from suite.profiles import PROFILES
    from suite.stages import STAGES

    quick = PROFILES["quick"]  # one gate prompt, 5 requests; 3 sections x 2 repeats; 2 launches x 3
    assert STAGES["gate"].requests_for(quick) == 5
    assert STAGES["latency"].requests_for(quick) == 1 + 4  # its quick settings: 1 warm-up, 4 measured
    assert STAGES["extraction"].requests_for(quick) == 6
    assert STAGES["restarts"].requests_for(quick) == 6
    assert STAGES["restarts"].requests_for(quick.model_copy(update={"stage_settings": {"restarts": {"caches": "both"}}})) == 12
    assert STAGES["sessions"].requests_for(quick) == 2 * 3  # its own settings: 2 sessions x 3 replicates
    assert STAGES["reloads"].requests_for(quick.model_copy(update={"stage_settings": {"reloads": {"launches": 2}}})) == 6
    assert STAGES["controls"].requests_for(quick) is None  # its rows depend on the runtime
    assert STAGES["sessions"].requests_for(quick.model_copy(update={"stage_settings": {"sessions": {"lora": True}}})) is None
    assert STAGES["gate"].requests_for(quick.model_copy(update={"gate_prompts": ["no-such-prompt"]})) is None


def test_a_subprocess_step_keeps_the_full_output_in_its_log(tmp_path: Path) -> None:
    display, out = plain()
    log_path = tmp_path / "install.log"
    with display.step("install fake") as step, log_path.open("w") as fh:
        proc = subprocess.Popen([sys.executable, "-c", "import sys, time; print('one', flush=True); "
                                 "time.sleep(0.15); print('two'); sys.exit(3)"], stdout=fh, stderr=subprocess.STDOUT)
        assert step.follow(proc, log_path, poll_s=0.02) == 3
    assert log_path.read_text().split() == ["one", "two"]
    assert step.note_text in ("", "one", "two")  # the latest line seen while it ran (a slow poll may see the last)
    assert len(lines(out)) == 2


def test_last_line_drops_escapes_and_carriage_returns() -> None:
    assert last_line("Collecting a\n\x1b[32mDownloading b\x1b[0m  10%\r  55%\r\n\n") == "55%"
    assert last_line("x" * 200).endswith("…") and len(last_line("x" * 200)) == progress.NOTE_CHARS
    assert last_line("") == ""


# -- (b) a terminal: a bar with counts -------------------------------------------------------------

def test_a_terminal_shows_a_bar_with_counts_and_a_spinner_with_the_latest_line() -> None:
    display, out = terminal()
    assert display.is_interactive()
    with display.stage("gate llamacpp", total=200) as stage:
        for _ in range(50):
            stage.advance()
        with display.step("start llamacpp", timeout_s=600) as step:
            step.note("load_tensors: loading model tensors\r")
            display.refresh()
            drawn = out.getvalue()
    assert "gate llamacpp" in drawn and "50/200 requests" in drawn
    assert "━" in drawn  # the bar
    assert "start llamacpp" in drawn and "of at most 600 s" in drawn and "load_tensors: loading model tensors" in drawn
    done = out.getvalue()
    assert "✓ start llamacpp: done in" in done and "✓ gate llamacpp: done in" in done
    assert "(50 requests" in done
    assert display._progress is None  # nothing live once nothing runs


def test_a_terminal_stage_without_a_total_shows_the_count() -> None:
    display, out = terminal()
    with display.stage("controls llamacpp") as stage:
        stage.advance(7)
        display.refresh()
        assert "7 requests" in out.getvalue() and "/" not in out.getvalue().split("7 requests")[0][-4:]


# -- (c) several threads ---------------------------------------------------------------------------

@pytest.mark.parametrize("make", [plain, terminal], ids=["plain", "terminal"])
def test_advances_from_eight_threads_add_up(make) -> None:  # type: ignore[no-untyped-def]
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often: an unlocked count would lose advances
    try:
        _eight_threads(make)
    finally:
        sys.setswitchinterval(before)


def _eight_threads(make) -> None:  # type: ignore[no-untyped-def]
    display, out = make()
    start = threading.Barrier(8)

    def worker(k: int) -> None:
        start.wait()
        for i in range(250):
            display.advance(failed=(k == 0 and i < 10))

    with display.stage("gate llamacpp", total=2000) as stage:
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert (stage.completed, stage.failed) == (2000, 10)
        if display._progress is not None:
            (task,) = display._progress.tasks
            assert task.completed == 2000 and task.fields["failed"] == 10
    assert len(lines(out)) <= 12
    assert "2000 requests, 10 failed" in out.getvalue()


def test_log_lines_to_a_file_are_plain_and_unwrapped(tmp_path: Path) -> None:
    """Output to a log file or a pipe: one line per log record with its time and level, not wrapped
    at 80 columns and not padded with spaces (a terminal gets rich's live layout instead)."""
    long_name = "x" * 120  # longer than the 80 columns, within the 128 characters a name may have
    out = subprocess.run([sys.executable, "-m", "suite.cli", "bench", "--model", "tiny", "--arms", long_name],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "80"})
    assert out.returncode == 2
    err_lines = out.stderr.splitlines()
    assert len(err_lines) == 1 and long_name in err_lines[0], out.stderr  # one line, whatever its length
    import logging

    from suite import cli, progress

    assert not progress.interactive()  # pytest captures the streams: not a terminal
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    try:
        cli._setup_logging(verbose=False, version=False)
        handler = root.handlers[0]
        assert type(handler) is logging.StreamHandler
        record = logging.LogRecord("suite", logging.INFO, __file__, 1, "probe " + long_name + " unavailable", None, None)
        line = handler.format(record)
        assert "\n" not in line and line.endswith(long_name + " unavailable") and " INFO    probe " in line
    finally:
        root.handlers[:] = saved
        root.setLevel(level)

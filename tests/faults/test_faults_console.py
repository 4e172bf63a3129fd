"""Text from records never breaks the console: failure reasons, answers and log lines that look like
rich markup (`[/INST]`, `[bold]`) are shown as they are in every table and line the suite prints."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from suite.records import load_all

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "results"
REPO = Path(__file__).resolve().parents[2]
HOSTILE = "runtime said [/INST] then [bold red]boom[/bold red] and [link=x]y[/link] \\[x]"


def _console() -> Console:
    return Console(file=io.StringIO(), width=400, record=True, color_system=None, force_terminal=False)


def _results_with_a_hostile_reason(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    shutil.copytree(GOLDEN, results)
    summary = next(results.glob("tiny/llamacpp/*/summary.json"))
    data = json.loads(summary.read_text())
    data["status"], data["reason"] = "failed", HOSTILE
    summary.write_text(json.dumps(data))
    return results


@pytest.mark.fault
def test_suite_results_shows_a_reason_that_looks_like_markup(tmp_path: Path, fault_report: Any) -> None:
    results = _results_with_a_hostile_reason(tmp_path)
    cli = Path(sys.executable).parent / "suite"
    proc = subprocess.run([str(cli), "results"], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env={**os.environ, "RESULTS": str(results), "COLUMNS": "400", "CI": "1",
                                                "PYTHONPATH": str(REPO)})
    fault_report(tracebacks=int("Traceback" in proc.stderr), records_lost=int(proc.returncode != 0))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "[bold red]boom[/bold red]" in proc.stdout and "[/INST]" in proc.stdout


@pytest.mark.fault
def test_the_bench_table_and_the_ray_table_show_a_reason_as_it_is(tmp_path: Path, monkeypatch: Any,
                                                                    fault_report: Any) -> None:
    from suite import cli, distributed
    from suite.stages.controls import format_controls_table

    summaries = load_all(_results_with_a_hostile_reason(tmp_path))
    console = _console()
    monkeypatch.setattr(cli, "console", console)
    raised = 0
    try:
        cli._print_summaries(summaries)
        board = distributed.Progress(console, ["a[/b]"])
        board.arms["a[/b]"].detail = HOSTILE
        console.print(board._table())
        with_controls = [s for s in summaries if s.controls is not None][0]
        with_controls.controls.rows[0].reason = HOSTILE
        with_controls.controls.elimination = HOSTILE
        console.print(format_controls_table(with_controls.controls))
    except Exception:  # noqa: BLE001 - measured
        raised = 1
        raise
    finally:
        fault_report(tracebacks=raised)
    out = console.export_text()
    assert out.count("[bold red]boom[/bold red]") >= 3 and "[/INST]" in out and "a[/b]" in out


@pytest.mark.parametrize("interactive", [False, True])
def test_progress_lines_show_log_text_as_it_is(interactive: bool) -> None:
    """A step's name, its latest log line (a vLLM line with brackets) and its end line, as they are."""
    from suite.progress import Display

    console = Console(file=io.StringIO(), width=300, record=True, color_system=None, force_terminal=interactive)
    display = Display(console=console, interactive=interactive)
    with display.step("start [bold]x[/bold]") as step:
        step.note("INFO [model_runner.py:12] [/INST] loaded [red]weights[/red]")
        display.refresh()
    out = console.export_text()
    assert "start [bold]x[/bold]" in out
    if interactive:
        assert "INFO [model_runner.py:12] [/INST] loaded [red]weights[/red]" in out

"""Bytes from a runtime or a record never reach a terminal, a chart, a page or a spreadsheet as they are.

A runtime's answer or crash line, or a record edited by hand, may hold an escape sequence (an OSC
that sets the window title or writes the clipboard, a clear-screen), a NUL, a right-to-left override,
or a CSV cell a spreadsheet reads as a formula. Every string leaving the suite goes through one
sanitiser (suite.sanitize): the console, the charts, the pages, the CSV export. Parquet keeps values
as they were. What each fault costs is measured: an exception is a traceback, a run missing from
what is shown or exported is a record lost.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from suite.sanitize import CONTROL, csv_cell, printable

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "results"
REPO = Path(__file__).resolve().parents[2]
# An OSC that sets the window title, one that writes the clipboard, a clear-screen, a NUL, an RLO.
ESCAPES = "crash \x1b]0;owned\x07 then \x1b]52;c;ZWNobyBvd25lZA==\x07 and \x1b[2J\x1b[H, NUL \x00, RLO \u202egnp.exe"
FORMULAS = ["=HYPERLINK(\"http://example.com\",\"click\")", "+1+1", "-2+3", "@SUM(A1:A2)", "\tcmd", "\rcmd"]


def _hostile_results(tmp_path: Path) -> Path:
    """The golden tree with one run's reason holding escape sequences and answers that are formulas."""
    results = tmp_path / "results"
    shutil.copytree(GOLDEN, results)
    summary = next(results.glob("tiny/llamacpp/*/summary.json"))
    data = json.loads(summary.read_text())
    data["status"], data["reason"] = "failed", ESCAPES
    summary.write_text(json.dumps(data))
    requests = summary.parent / "requests.jsonl"
    lines = requests.read_text().splitlines()
    first = json.loads(lines[0])
    extra = [json.dumps(first | {"index": 100 + i, "text": text}) for i, text in enumerate([*FORMULAS, ESCAPES])]
    requests.write_text("\n".join([*lines, *extra]) + "\n")
    return results


def test_printable_replaces_every_control_character_and_keeps_layout() -> None:
    assert printable("a\x1b[2Jb") == "a\u241b[2Jb"
    assert printable("nul\x00 del\x7f c1\x9b rlo\u202e") == "nul\u2400 del\u2421 c1\ufffd rlo\ufffd"
    assert printable("tab\tand\nline") == "tab\tand\nline"
    assert printable("cr\r") == "cr\u240d"
    assert csv_cell("=1+1") == "'=1+1" and csv_cell("-x") == "'-x" and csv_cell("plain") == "plain"
    assert csv_cell("\tx") == "'\tx" and csv_cell("\rx") == "'\u240dx"


@pytest.mark.fault
def test_csv_export_neutralises_formulas_and_control_bytes_and_parquet_keeps_them(tmp_path: Path,
                                                                                fault_report: Any) -> None:
    from suite.export import export_tables

    results = _hostile_results(tmp_path)
    try:
        export_tables(results, "csv", tmp_path / "csv")
        export_tables(results, "parquet", tmp_path / "parquet")
    except Exception:  # noqa: BLE001 - measured
        fault_report(tracebacks=1)
        raise
    raw = (tmp_path / "csv" / "requests.csv").read_text()
    cells = [cell for row in csv.reader(io.StringIO(raw)) for cell in row]
    parquet = pl.read_parquet(tmp_path / "parquet" / "requests.parquet")
    answers = [t for t in parquet["text"].to_list() if t in FORMULAS or t == ESCAPES]
    fault_report(records_lost=len(FORMULAS) + 1 - len(answers))
    assert not [c for c in cells if c.startswith(("=", "+", "-", "@", "\t", "\r"))], "a formula cell"
    assert CONTROL.search(raw.replace("\r\n", "\n")) is None, "a control byte in the CSV"
    for formula in FORMULAS:
        assert csv_cell(formula) in cells
    runs = (tmp_path / "csv" / "runs.csv").read_text()
    assert printable(ESCAPES) in runs and "\x1b" not in runs
    assert sorted(answers) == sorted([*FORMULAS, ESCAPES])  # Parquet: typed and as it was


# -- the console and the pages ------------------------------------------------------------------------------

def _cli(args: list[str], results: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "suite.cli", *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env={**os.environ, "RESULTS": str(results), "COLUMNS": "400", "CI": "1",
                                         "PYTHONPATH": str(REPO)})


def _raw_controls(text: str) -> list[str]:
    return sorted({f"U+{ord(c):04X}" for c in CONTROL.findall(text.replace("\r\n", "\n"))})


@pytest.mark.fault
def test_suite_results_and_compare_show_escape_sequences_as_visible_text(tmp_path: Path, fault_report: Any) -> None:
    results = _hostile_results(tmp_path)
    a, b = sorted(results.glob("tiny/llamacpp/*/summary.json"))
    data = json.loads(b.read_text())
    data["signature"]["runtime_version"] = ESCAPES  # a version line a runtime printed
    b.write_text(json.dumps(data))
    listed = _cli(["results"], results)
    compared = _cli(["compare", a.parent.name, b.parent.name], results)
    fault_report(tracebacks=int("Traceback" in listed.stderr + compared.stderr),
                 records_lost=int(listed.returncode != 0) + int(compared.returncode not in (0, 1)))
    assert listed.returncode == 0 and compared.returncode in (0, 1), listed.stderr + compared.stderr
    assert _raw_controls(listed.stdout + listed.stderr) == [], listed.stdout
    assert _raw_controls(compared.stdout + compared.stderr) == [], compared.stdout
    assert "\u241b]0;owned" in listed.stdout and "\u241b]0;owned" in compared.stdout  # shown, visibly


@pytest.mark.fault
def test_the_bench_table_and_log_lines_show_escape_sequences_as_visible_text(tmp_path: Path, monkeypatch: Any,
                                                                             fault_report: Any) -> None:
    import logging

    from suite import cli
    from suite.records import load_all
    from suite.sanitize import PrintableFormatter, SafeConsole

    summaries = load_all(_hostile_results(tmp_path))
    for interactive in (False, True):
        console = SafeConsole(file=io.StringIO(), width=400, record=True, force_terminal=interactive,
                              color_system="truecolor" if interactive else None)
        monkeypatch.setattr(cli, "console", console)
        try:
            cli._print_summaries(summaries)
        except Exception:  # noqa: BLE001 - measured
            fault_report(tracebacks=1)
            raise
        out = console.file.getvalue()
        # rich's own styles are escape sequences of a terminal; what the record held is not among them
        assert "]0;owned" not in out.replace("\u241b]0;owned", "") and "\x00" not in out and "\u202e" not in out
        assert "\x1b[2J" not in out and "\u241b]0;owned" in out
    record = logging.LogRecord("suite", logging.WARNING, __file__, 1, "runtime said %s", (ESCAPES,), None)
    line = PrintableFormatter("%(message)s").format(record)
    fault_report()
    assert _raw_controls(line) == [] and "\u241b[2J" in line


@pytest.mark.fault
def test_pages_carry_no_control_character_of_a_record(tmp_path: Path, fault_report: Any) -> None:
    from suite.site.publish import build_site

    results = _hostile_results(tmp_path)
    try:
        report = build_site(results, tmp_path / "public")
    except Exception:  # noqa: BLE001 - measured
        fault_report(tracebacks=1)
        raise
    pages = {p: p.read_text() for p in (tmp_path / "public").rglob("*.html")}
    fault_report(records_lost=int(report.pages < 13))
    assert not {str(p): _raw_controls(t) for p, t in pages.items() if _raw_controls(t)}
    assert any("\u241b]0;owned" in t for t in pages.values())

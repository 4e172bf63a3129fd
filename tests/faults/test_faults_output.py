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

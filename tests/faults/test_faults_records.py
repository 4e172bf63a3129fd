"""Records that are not what they claim, injected into a results folder: a name holding a control
byte, a summary missing a field. Each is named in one line and left out; every view (`suite site`,
`suite results`, `suite export`) shows the rest, and the chart renderer never sees a control byte
(it aborts the whole process on one: a panic that cannot unwind). What each fault costs is
measured: a run missing beyond the bad one is a record lost, an exception or an abort a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "results"
REPO = Path(__file__).resolve().parents[2]
RUNS = 6  # in the golden tree


def _cli(args: list[str], results: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "suite.cli", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env={**os.environ, "RESULTS": str(results), "COLUMNS": "400", "CI": "1",
                                        "PYTHONPATH": str(REPO)})


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    results = tmp_path / "results"
    shutil.copytree(GOLDEN, results)
    return results, next(results.glob("tiny/llamacpp/*/summary.json"))


def _aborted(proc: subprocess.CompletedProcess) -> bool:
    return "Traceback" in proc.stderr or proc.returncode < 0 or proc.returncode >= 128


def test_a_chart_label_with_a_control_byte_is_drawn() -> None:
    """The renderer itself, in a process of its own: a label holding ESC aborts it without the suite's sanitiser."""
    code = ("from suite.site import charts; import json; "
            "spec = {'data': {'name': 'd'}, 'mark': 'bar', 'encoding': {'x': {'field': 'x', 'type': 'quantitative'}, "
            "'y': {'field': 'arm', 'type': 'nominal'}}}; "
            "print(len(charts.render(json.dumps(spec), {'d': [{'arm': 'a\\x1b]0;x\\x07b', 'x': 1}]})))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0 and int(proc.stdout) > 100, proc.stderr[-2000:]


@pytest.mark.fault
@pytest.mark.parametrize("field, value", [("arm", "llama\x1bcpp"), ("model", "ti\x00ny"), ("arm", ""),
                                          ("run_id", "r\u202eun"), ("started_at", "2026\x1b[2J")])
def test_a_record_whose_name_holds_a_control_byte_is_named_and_the_site_builds(tmp_path: Path, fault_report: Any,
                                                                                field: str, value: str) -> None:
    results, summary = _tree(tmp_path)
    data = json.loads(summary.read_text())
    data[field] = value
    summary.write_text(json.dumps(data))
    proc = _cli(["site", "--out", str(tmp_path / "public")], results, tmp_path)
    pages = list((tmp_path / "public").rglob("*.html"))
    fault_report(tracebacks=int(_aborted(proc)), records_lost=int(not pages))
    assert proc.returncode == 0, proc.stderr[-3000:]
    skipped = [ln for ln in proc.stderr.splitlines() if "run record skipped" in ln]
    assert len(skipped) == 1 and str(summary) in skipped[0] and field in skipped[0], proc.stderr
    assert "\x1b" not in proc.stderr and "\x00" not in proc.stderr and "\u202e" not in proc.stderr
    assert "1 run records could not be read" in proc.stderr + proc.stdout


@pytest.mark.fault
@pytest.mark.parametrize("missing", ["runtime", "model", "started_at"])
def test_a_record_missing_a_field_is_named_and_every_view_shows_the_rest(tmp_path: Path, fault_report: Any,
                                                                         missing: str) -> None:
    results, summary = _tree(tmp_path)
    data = json.loads(summary.read_text())
    del data[missing]
    summary.write_text(json.dumps(data))
    bad_id = summary.parent.name
    site = _cli(["site", "--out", str(tmp_path / "public")], results, tmp_path)
    listed = _cli(["results", "--json"], results, tmp_path)
    exported = _cli(["export", "--format", "csv", "--out", str(tmp_path / "export")], results, tmp_path)
    procs = (site, listed, exported)
    shown = json.loads(listed.stdout)["runs"] if listed.returncode == 0 else []
    runs_csv = tmp_path / "export" / "runs.csv"
    exported_rows = runs_csv.read_text().count("\n") - 1 if runs_csv.exists() else 0
    fault_report(tracebacks=sum(_aborted(p) for p in procs),
                 records_lost=(RUNS - 1 - len(shown)) + (RUNS - 1 - exported_rows) + int(site.returncode != 0))
    for proc in procs:
        assert proc.returncode == 0, proc.stderr[-3000:]
        lines = [ln for ln in proc.stderr.splitlines() if "run record skipped" in ln]
        assert len(lines) == 1 and str(summary) in lines[0] and missing in lines[0], proc.stderr
    assert len(shown) == RUNS - 1 and bad_id not in {row["run_id"] for row in shown}
    assert exported_rows == RUNS - 1
    assert (tmp_path / "public" / "index.html").exists()

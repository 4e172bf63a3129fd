"""Run records: write-once files, schema versions, incomplete runs, and `suite results`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from suite.errors import SuiteError
from suite.records import read_requests
from suite.site.figures import load_runs
from suite.records import SCHEMA_VERSION, find_incomplete, load_all, load_summary, write_once

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "results"
REPO = Path(__file__).resolve().parents[2]


def test_write_once_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "run" / "summary.json"
    write_once(path, "{}")
    with pytest.raises(SuiteError, match="never overwritten"):
        write_once(path, '{"other": 1}')
    assert path.read_text() == "{}"
    assert [p.name for p in path.parent.iterdir()] == ["summary.json"]  # no temporary file left


def test_a_record_file_is_as_readable_as_any_file_the_user_creates(tmp_path: Path) -> None:
    """Written through a temporary file (mode 0600), a record still gets the user's usual mode:
    a results folder served or shared is readable by those it is shared with."""
    path = tmp_path / "run" / "run.json"
    write_once(path, "{}")
    plain = tmp_path / "plain"
    plain.write_text("{}")
    assert path.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777


@pytest.mark.parametrize("version, sentence", [
    (SCHEMA_VERSION + 1, "is newer than this suite's"),
    (0, "re-run the benchmark or use the suite version that wrote it"),
])
def test_other_schema_versions_are_refused(tmp_path: Path, version: int, sentence: str) -> None:
    src = next(GOLDEN.glob("tiny/llamacpp/*/summary.json"))
    data = json.loads(src.read_text())
    data["schema_version"] = version
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SuiteError) as err:
        load_summary(path)
    message = str(err.value)
    assert sentence in message and str(path) in message and "\n" not in message


def test_incomplete_runs_are_listed_and_found() -> None:
    summaries = load_all(GOLDEN)
    incomplete = [s for s in summaries if s.status == "incomplete"]
    assert [(s.model, s.arm) for s in incomplete] == [("nano", "llamacpp")]
    assert incomplete[0].gate is not None and incomplete[0].latency is None  # stages written so far
    assert "--resume" in (incomplete[0].reason or "")
    run_dir = find_incomplete(GOLDEN, "nano", "llamacpp")
    assert run_dir is not None and not (run_dir / "summary.json").exists()
    assert find_incomplete(GOLDEN, "tiny", "llamacpp") is None


def test_a_cut_request_line_is_skipped(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(next(GOLDEN.glob("nano/llamacpp/*")), run)
    path = run / "requests.jsonl"
    lines = path.read_text().splitlines()
    path.chmod(0o644)
    path.write_text("\n".join(lines) + '\n{"kind": "gate", "text": "cut sh')
    assert len(read_requests(run, ["gate"])) == len(lines)


def test_request_lines_are_read_as_their_kinds_models(tmp_path: Path) -> None:
    """Each kind of line comes back as its model; a line that does not match it is skipped, not fatal."""
    from suite.stages.latency import LatencyLine
    from suite.stages.lines import AnswerLine

    run = tmp_path / "run"
    shutil.copytree(next(GOLDEN.glob("tiny/llamacpp/*")), run)
    lines = read_requests(run, ["gate", "latency"])
    assert {type(q) for q in lines} == {AnswerLine, LatencyLine}
    gate = [q for q in lines if q.kind == "gate"]
    assert all(q.prompt_id and q.index >= 0 for q in gate)
    path = run / "requests.jsonl"
    path.chmod(0o644)
    path.write_text(path.read_text() + '{"kind": "gate", "at": "x", "prompt_id": "p", "index": "first"}\n')
    assert len(read_requests(run, ["gate"])) == len(gate)


def test_a_request_line_that_does_not_fit_its_kind_is_refused_before_it_is_written(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from suite.records import RunManifest, RunRecord

    rec = RunRecord.create(tmp_path, RunManifest(run_id="r", model="m", arm="a", runtime="x", launcher="local",
                                                 profile="quick", started_at="now"))
    rec.record_request("gate", prompt_id="p", index=0, text="ok")
    with pytest.raises(ValidationError):
        rec.record_request("gate", prompt_id="p", index="first")
    assert len(rec.requests_path.read_text().splitlines()) == 1


def test_suite_results_lists_every_run() -> None:
    cli = Path(sys.executable).parent / "suite"
    proc = subprocess.run([str(cli), "results"], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, RESULTS=str(GOLDEN), COLUMNS="250"))
    assert proc.returncode == 0, proc.stderr
    for s in load_all(GOLDEN):
        assert s.run_id[:20] in proc.stdout
    assert "incomplete" in proc.stdout and "refused" in proc.stdout
    assert sum(len(a.runs) for m in load_runs(GOLDEN).values() for a in m.arms.values()) == 6

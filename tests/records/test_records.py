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
        assert s.short_id in proc.stdout  # each run's own id, whole
    assert "incomplete" in proc.stdout
    listed = subprocess.run([str(cli), "results", "--format", "csv"], cwd=REPO, capture_output=True, text=True,
                            timeout=120, env=dict(os.environ, RESULTS=str(GOLDEN)))
    assert listed.returncode == 0 and all(s.run_id in listed.stdout for s in load_all(GOLDEN))
    assert sum(len(a.runs) for m in load_runs(GOLDEN).values() for a in m.arms.values()) == 6


# -- compacted records (request lines, stage files and summary kept as `<name>.xz`) ---------------

def _tree_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_compacted_tree_reads_and_publishes_as_the_plain_one(tmp_path: Path) -> None:
    """Every run of the golden tree compacted (the incomplete one too): the same summaries, request
    lines and pages, byte for byte; expanded again, the same files as before."""
    from suite.records import compact_run, expand_run, iter_run_dirs
    from suite.site.publish import build_site

    results = tmp_path / "results"
    shutil.copytree(GOLDEN, results)
    before = _tree_bytes(results)
    summaries = [s.model_dump_json() for s in load_all(results)]
    lines = {d.name: [x.model_dump_json() for x in read_requests(d, ["gate", "latency"])] for d in iter_run_dirs(results)}
    build_site(results, tmp_path / "plain")
    for run in iter_run_dirs(results):
        assert compact_run(run)
    packed = [str(p.relative_to(results)) for p in results.rglob("*.xz")]
    assert any(p.endswith("requests.jsonl.xz") for p in packed) and any(p.endswith("summary.json.xz") for p in packed)
    assert any("/stages/" in p for p in packed)
    assert not list(results.rglob("requests.jsonl")) and not list(results.rglob("summary.json"))
    assert [s.model_dump_json() for s in load_all(results)] == summaries
    assert {d.name: [x.model_dump_json() for x in read_requests(d, ["gate", "latency"])]
            for d in iter_run_dirs(results)} == lines
    assert find_incomplete(results, "nano", "llamacpp") is not None
    assert find_incomplete(results, "tiny", "llamacpp") is None  # a compacted summary still ends a run
    build_site(results, tmp_path / "packed")
    assert _tree_bytes(tmp_path / "packed") == _tree_bytes(tmp_path / "plain")
    for run in iter_run_dirs(results):
        expand_run(run)
    assert _tree_bytes(results) == before


def test_a_damaged_compacted_record_is_one_line_and_a_cut_one_keeps_its_lines(tmp_path: Path, caplog) -> None:
    import lzma

    from suite.records import compact_run

    run = tmp_path / "run"
    shutil.copytree(next(GOLDEN.glob("tiny/llamacpp/*")), run)
    lines = read_requests(run, ["gate"])
    compact_run(run)
    packed = (run / "requests.jsonl.xz").read_bytes()
    (run / "requests.jsonl.xz").write_bytes(packed[: len(packed) // 2])  # cut short
    kept = read_requests(run, ["gate"])
    assert 0 < len(kept) <= len(lines) and kept == lines[: len(kept)]  # the lines before the cut
    assert "requests.jsonl.xz: request lines after line" in caplog.text
    (run / "summary.json.xz").write_bytes(b"not xz at all")
    with pytest.raises(SuiteError) as err:
        load_summary(run / "summary.json")
    assert str(run / "summary.json.xz") in str(err.value) and "\n" not in str(err.value)
    (run / "summary.json.xz").write_bytes(lzma.compress(b'{"schema_version": 999}'))
    with pytest.raises(SuiteError, match="summary.json.xz: schema version 999 is newer"):
        load_summary(run / "summary.json")


def test_a_plain_file_beside_its_compacted_form_is_the_record(tmp_path: Path) -> None:
    """A compacting cut between writing `<name>.xz` and removing `<name>` leaves both: the plain
    one is read, and compacting again finishes the work."""
    import lzma

    from suite.records import compact_run

    run = tmp_path / "run"
    shutil.copytree(next(GOLDEN.glob("tiny/llamacpp/*")), run)
    want = load_summary(run / "summary.json").model_dump_json()
    (run / "summary.json.xz").write_bytes(lzma.compress(b"{}"))
    assert load_summary(run / "summary.json").model_dump_json() == want
    compact_run(run)
    assert not (run / "summary.json").exists() and load_summary(run / "summary.json").model_dump_json() == want


def test_a_compacted_incomplete_run_is_expanded_before_a_resume_and_a_live_one_never_compacted(tmp_path: Path) -> None:
    from suite.records import RunInUse, RunRecord, compact_run

    results = tmp_path / "results"
    shutil.copytree(GOLDEN, results)
    run = find_incomplete(results, "nano", "llamacpp")
    assert run is not None
    plain = (run / "requests.jsonl").read_bytes()
    compact_run(run)
    assert (run / "stages" / "gate.json.xz").exists() and not (run / "requests.jsonl").exists()
    record = RunRecord.open_incomplete(run)
    try:
        assert (run / "requests.jsonl").read_bytes() == plain and not list(run.rglob("*.xz"))
        assert record.stage_done("gate") and record.read_stage("gate") is not None
        record.record_request("gate", prompt_id="p", index=99, text="appended plain")
        with pytest.raises(RunInUse, match="live suite process"):
            compact_run(run)
    finally:
        record.release()
    assert (run / "requests.jsonl").read_bytes().startswith(plain)


def test_the_compacting_tool_says_bad_input_in_one_line(tmp_path: Path) -> None:
    tool = REPO / "tools" / "compact_records.py"
    done = subprocess.run([sys.executable, str(tool), str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "neither a run folder (run.json) nor a results tree" in done.stderr
    results = tmp_path / "results"
    shutil.copytree(GOLDEN, results)
    done = subprocess.run([sys.executable, str(tool), str(results)], capture_output=True, text=True)
    assert done.returncode == 0 and "compacted to" in done.stdout, done.stderr
    assert len(load_all(results)) == len(load_all(GOLDEN))

"""Symbolic links planted in a results folder or beside an export, injected: none is followed.

A results folder may be shared, copied from elsewhere or written by another user: a `.owner` link
would have `--resume` truncate the file it names, a linked `runs.csv` would have an export overwrite
it, a linked `requests.jsonl` or model folder would carry a file from outside into an export or a
site. Reading records and writing exports follow no link; lock and owner files are opened with
O_NOFOLLOW. What each fault costs is measured: a file outside the results changed, or copied into
what the suite shows, is a record mixed; an exception other than the one-line error a traceback.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from suite.errors import SuiteError
from suite.records import RunRecord, load_all, read_requests

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "results"
OUTSIDE_TEXT = "a file outside the results: never truncated, copied or published\n"


def _outside(tmp_path: Path, name: str = "outside.txt", text: str = OUTSIDE_TEXT) -> Path:
    path = tmp_path / "elsewhere" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def _results(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    shutil.copytree(GOLDEN, results)
    return results


@pytest.mark.fault
def test_resume_never_truncates_the_file_an_owner_link_names(tmp_path: Path, fault_report: Any) -> None:
    results = _results(tmp_path)
    run_dir = next(results.glob("tiny/llamacpp/*/summary.json")).parent
    incomplete = run_dir.with_name("20991231T000000000000Z-linked00")
    shutil.copytree(run_dir, incomplete)
    (incomplete / "summary.json").unlink()
    target = _outside(tmp_path)
    (incomplete / ".owner").symlink_to(target)
    outcome: BaseException | None = None
    try:
        RunRecord.open_incomplete(incomplete).release()
    except BaseException as exc:  # noqa: BLE001 - measured below
        outcome = exc
    fault_report(records_mixed=int(target.read_text() != OUTSIDE_TEXT),
                 tracebacks=int(outcome is not None and not isinstance(outcome, SuiteError)))
    assert target.read_text() == OUTSIDE_TEXT
    assert isinstance(outcome, SuiteError) and "symbolic link" in str(outcome) and "\n" not in str(outcome)


@pytest.mark.fault
def test_a_request_line_is_never_appended_through_a_link(tmp_path: Path, fault_report: Any) -> None:
    from tests.faults.test_faults_resume import golden_manifest

    rec = RunRecord.create(tmp_path / "results", golden_manifest().model_copy(update={"run_id": "r1"}))
    target = _outside(tmp_path)
    rec.requests_path.symlink_to(target)
    try:
        with pytest.raises(SuiteError, match="symbolic link"):
            rec.record_request("gate", stage="gate", prompt_id="p", index=0, text="x")
        with pytest.raises(SuiteError, match="symbolic link"):
            rec.set_aside_unfinished(set())
    finally:
        rec.release()
        fault_report(records_mixed=int(target.read_text() != OUTSIDE_TEXT))
    assert target.read_text() == OUTSIDE_TEXT


@pytest.mark.fault
def test_export_never_writes_through_a_linked_file(tmp_path: Path, fault_report: Any) -> None:
    from suite.export import export_tables

    results = _results(tmp_path)
    out = tmp_path / "export"
    out.mkdir()
    target = _outside(tmp_path)
    (out / "runs.csv").symlink_to(target)
    export_tables(results, "csv", out)
    fault_report(records_mixed=int(target.read_text() != OUTSIDE_TEXT))
    assert target.read_text() == OUTSIDE_TEXT
    assert not (out / "runs.csv").is_symlink() and pl.read_csv(out / "runs.csv").height == 6
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []  # no temporary file left


@pytest.mark.fault
def test_a_linked_request_file_or_record_is_never_read(tmp_path: Path, fault_report: Any, caplog: Any) -> None:
    from suite.export import export_tables

    results = _results(tmp_path)
    runs = sorted(p.parent for p in results.glob("*/*/*/summary.json"))
    line = json.loads((runs[0] / "requests.jsonl").read_text().splitlines()[0])
    secret = _outside(tmp_path, "secret.jsonl", json.dumps(line | {"text": "SECRET FROM OUTSIDE"}) + "\n")
    (runs[0] / "requests.jsonl").unlink()
    (runs[0] / "requests.jsonl").symlink_to(secret)
    summary_elsewhere = _outside(tmp_path, "summary.json", (runs[1] / "summary.json").read_text())
    (runs[1] / "summary.json").unlink()
    (runs[1] / "summary.json").symlink_to(summary_elsewhere)
    assert read_requests(runs[0], ["gate"]) == [] and "symbolic link (not followed)" in caplog.text
    export_tables(results, "parquet", tmp_path / "export")
    texts = pl.read_parquet(tmp_path / "export" / "requests.parquet")["text"].to_list()
    exported_runs = pl.read_parquet(tmp_path / "export" / "runs.parquet")["run_id"].to_list()
    fault_report(records_mixed=int("SECRET FROM OUTSIDE" in texts) + int(runs[1].name in exported_runs))
    assert "SECRET FROM OUTSIDE" not in texts
    assert runs[1].name not in exported_runs and len(exported_runs) == 5  # named and left out, the rest shown
    assert any(str(runs[1] / "summary.json") in r.message and "symbolic link" in r.message for r in caplog.records)


@pytest.mark.fault
def test_a_linked_compacted_request_file_or_record_is_never_read(tmp_path: Path, fault_report: Any, caplog: Any) -> None:
    """The same for a compacted record (`requests.jsonl.xz`, `summary.json.xz`): the link is not
    followed, the run's lines are none and the run is named and left out."""
    import lzma

    from suite.export import export_tables
    from suite.records import compact_run

    results = _results(tmp_path)
    runs = sorted(p.parent for p in results.glob("*/*/*/summary.json"))
    line = json.loads((runs[0] / "requests.jsonl").read_text().splitlines()[0])
    for run in runs[:2]:
        compact_run(run)
    secret = _outside(tmp_path, "secret.jsonl.xz", "")
    secret.write_bytes(lzma.compress((json.dumps(line | {"text": "SECRET FROM OUTSIDE"}) + "\n").encode()))
    (runs[0] / "requests.jsonl.xz").unlink()
    (runs[0] / "requests.jsonl.xz").symlink_to(secret)
    summary_elsewhere = _outside(tmp_path, "summary.json.xz", "")
    summary_elsewhere.write_bytes((runs[1] / "summary.json.xz").read_bytes())
    (runs[1] / "summary.json.xz").unlink()
    (runs[1] / "summary.json.xz").symlink_to(summary_elsewhere)
    assert read_requests(runs[0], ["gate"]) == [] and "symbolic link (not followed)" in caplog.text
    export_tables(results, "parquet", tmp_path / "export")
    texts = pl.read_parquet(tmp_path / "export" / "requests.parquet")["text"].to_list()
    exported_runs = pl.read_parquet(tmp_path / "export" / "runs.parquet")["run_id"].to_list()
    fault_report(records_mixed=int("SECRET FROM OUTSIDE" in texts) + int(runs[1].name in exported_runs))
    assert "SECRET FROM OUTSIDE" not in texts
    assert runs[1].name not in exported_runs and len(exported_runs) == 5
    assert any(str(runs[1] / "summary.json.xz") in r.message and "symbolic link" in r.message for r in caplog.records)


@pytest.mark.fault
def test_a_model_folder_linked_from_outside_is_not_published(tmp_path: Path, fault_report: Any) -> None:
    from suite.site.publish import build_site

    results = tmp_path / "results"
    shutil.copytree(GOLDEN / "tiny", results / "tiny")
    elsewhere = tmp_path / "elsewhere" / "nano"
    shutil.copytree(GOLDEN / "nano", elsewhere)
    (results / "nano").symlink_to(elsewhere, target_is_directory=True)
    (results / "tiny" / "linked-arm").symlink_to(elsewhere / "llamacpp", target_is_directory=True)
    models = {s.model for s in load_all(results)}
    report = build_site(results, tmp_path / "public")
    published = [p.name for p in (tmp_path / "public" / "models").glob("*.html")]
    fault_report(records_mixed=int("nano" in models) + int(any("nano" in p for p in published)))
    assert models == {"tiny"} and report.runs == 4, (models, report)
    assert not any("nano" in p for p in published)


@pytest.mark.fault
def test_lock_files_are_never_opened_through_a_link(tmp_path: Path, fault_report: Any) -> None:
    from suite.gpu import machine_lock
    from suite.site.publish import build_site

    results = tmp_path / "results"
    shutil.copytree(GOLDEN / "nano", results / "nano")
    target = _outside(tmp_path)
    (tmp_path / ".public.lock").symlink_to(target)
    gpu_lock = tmp_path / "gpu.lock"
    gpu_lock.symlink_to(target)
    outcomes: list[BaseException | None] = []
    for attempt in (lambda: build_site(results, tmp_path / "public"), lambda: machine_lock(gpu_lock).__enter__()):
        try:
            attempt()
            outcomes.append(None)
        except BaseException as exc:  # noqa: BLE001 - measured below
            outcomes.append(exc)
    fault_report(records_mixed=int(target.read_text() != OUTSIDE_TEXT),
                 tracebacks=sum(o is not None and not isinstance(o, SuiteError) for o in outcomes))
    assert target.read_text() == OUTSIDE_TEXT
    assert all(isinstance(o, SuiteError) and "\n" not in str(o) for o in outcomes), outcomes

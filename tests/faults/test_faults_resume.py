"""`--resume` never takes over a live run and never mixes configurations; a linked record survives
a crash.

A live run is a real second process that holds a run folder and keeps appending request lines
while this one tries to resume it; what it wrote is counted line by line afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from suite.bench import BenchSession, configuration_differences, plan_arms, run_arm
from suite.profiles import get_profile
from suite.records import RunInUse, RunManifest, RunRecord, find_incomplete, write_once

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "results"


def golden_manifest() -> RunManifest:
    path = next(GOLDEN.glob("tiny/llamacpp/*/run.json"))
    return RunManifest.model_validate_json(path.read_text())


LIVE_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from suite.records import RunManifest, RunRecord
    manifest = RunManifest.model_validate_json(Path(sys.argv[2]).read_text())
    manifest = manifest.model_copy(update={"run_id": "20991231T000000000000Z-live0000", "arm": "llamacpp"})
    rec = RunRecord.create(Path(sys.argv[1]), manifest)
    print(rec.dir, flush=True)
    n = 0
    deadline = time.monotonic() + float(sys.argv[3])
    while time.monotonic() < deadline:
        rec.record_request("gate", stage="gate", prompt_id="p", index=n, text="x" * 50)
        n += 1
        time.sleep(0.002)
    print(n, flush=True)
""")


@pytest.mark.fault
def test_resume_refuses_a_live_run_and_leaves_its_lines_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              fault_report) -> None:
    results = tmp_path / "results"
    golden = next(GOLDEN.glob("tiny/llamacpp/*/run.json"))
    writer = subprocess.Popen([sys.executable, "-c", LIVE_WRITER, str(results), str(golden), "3"], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    run_dir = Path(writer.stdout.readline().strip())
    time.sleep(0.5)  # lines of a stage that has not finished are being written now
    assert find_incomplete(results, "tiny", "llamacpp") == run_dir

    # The record layer refuses, naming the holder ...
    with pytest.raises(RunInUse) as err:
        RunRecord.open_incomplete(run_dir)
    assert f"pid {writer.pid}" in str(err.value) and "\n" not in str(err.value)

    # ... and so does the bench: the arm is not run, with that line as its reason.
    plan = plan_arms("tiny", ["llamacpp"], "local", "quick")[0]
    monkeypatch.setattr(plan.launcher, "check_available", lambda: None)
    monkeypatch.setattr(plan.launcher, "prepare", lambda runtime, model_path=None: None)
    monkeypatch.setattr("suite.bench.runner.prepare_format", lambda card, fmt: None)
    tracebacks = 0
    try:
        summary = run_arm(plan, results, ["gate"], resume=True)
    except Exception:  # noqa: BLE001 - counted
        tracebacks, summary = 1, None
    written = int(writer.stdout.readline())
    writer.wait()
    lines = [json.loads(ln) for ln in (run_dir / "requests.jsonl").read_text().splitlines()]
    indexes = [ln["index"] for ln in lines]
    mixed = int((run_dir / "requests-interrupted.jsonl").exists()) + len(indexes) - len(set(indexes))
    fault_report(records_lost=written - len(lines), records_mixed=mixed, tracebacks=tracebacks)
    assert summary is not None and summary.status == "skipped" and "live suite process" in (summary.reason or "")
    assert indexes == list(range(written)), "the live run's lines were moved or lost"
    assert mixed == 0
    # Its writer gone (it never wrote a summary), the run may now be resumed.
    RunRecord.open_incomplete(run_dir).release()


def test_a_second_resumer_in_this_process_is_refused_too(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, golden_manifest().model_copy(update={"run_id": "r1"}))
    with pytest.raises(RunInUse):
        RunRecord.open_incomplete(rec.dir)
    rec.release()
    again = RunRecord.open_incomplete(rec.dir)
    with pytest.raises(RunInUse):
        RunRecord.open_incomplete(rec.dir)
    again.release()


def test_a_finished_run_releases_its_owner_lock_and_leaves_no_lock_file(tmp_path: Path) -> None:
    from suite.errors import SuiteError
    from suite.records import Summary

    m = golden_manifest().model_copy(update={"run_id": "r2"})
    rec = RunRecord.create(tmp_path, m)
    assert (rec.dir / ".owner").is_file()
    rec.finish(Summary(**m.model_dump(exclude={"signature", "profile_settings"}), status="complete"))
    assert sorted(p.name for p in rec.dir.iterdir()) == ["run.json", "summary.json"]
    with pytest.raises(SuiteError, match="finished"):
        RunRecord.open_incomplete(rec.dir)
    assert not (rec.dir / ".owner").exists()


# ---------------------------------------------------------------- one configuration per record


def test_configuration_differences_are_named_and_the_port_is_not_one() -> None:
    manifest = golden_manifest()
    profile = get_profile(manifest.profile)
    sig = manifest.signature
    assert sig is not None
    same = sig.model_copy(update={"command": [a.replace("{port}", "41234") for a in sig.command], "digest": "other"})
    then = manifest.model_copy(update={"signature": sig.model_copy(update={
        "command": [a.replace("{port}", "38000") for a in sig.command]})})
    assert configuration_differences(then, same, profile) == []
    newer = same.model_copy(update={"suite_version": "9.9.9"})
    assert configuration_differences(then, newer, profile) == [f"suite version {sig.suite_version} then, 9.9.9 now"]
    other_seed = same.model_copy(update={"command": [*same.command[:-4], "--seed", "7", "-c", "4096"]})
    assert configuration_differences(then, other_seed, profile) == ["signature field command"]
    assert configuration_differences(then, same, get_profile("full"))[0].startswith(f"profile {manifest.profile} then")
    with_settings = then.model_copy(update={"profile_settings": profile.model_dump(mode="json")})
    more = profile.model_copy(update={"gate_requests": profile.gate_requests + 1})
    assert configuration_differences(with_settings, same, more) == ["profile settings gate_requests"]
    assert configuration_differences(with_settings, same, profile) == []
    reported = same.model_copy(update={"server_reports": {"/v1/models": {"created": 1767225600}}})
    assert configuration_differences(then, reported, profile) == [], "a server's self-report is not configuration"
    assert configuration_differences(then.model_copy(update={"signature": None}), same, profile) == [
        "the run recorded no signature"]


@pytest.mark.fault
def test_a_resume_with_another_configuration_starts_a_new_run(tmp_path: Path, fault_report,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """The interrupted run keeps its lines and stays incomplete; the new launch gets its own run."""
    manifest = golden_manifest()
    results = tmp_path / "results"
    old = RunRecord.create(results, manifest.model_copy(update={
        "profile_settings": get_profile(manifest.profile).model_dump(mode="json")}))
    old.record_request("gate", stage="gate", prompt_id="p", index=0, text="then")
    old.release()  # the interrupted suite is gone
    before = (old.dir / "requests.jsonl").read_bytes()
    plan = plan_arms("tiny", ["llamacpp"], "local", manifest.profile, gate_requests=99)[0]
    session = BenchSession(plan, results, resume=True)
    assert session.previous is not None and session.previous.dir == old.dir
    session._resume_or_not(session.previous, manifest.signature)
    assert session.record is None, "a run of another configuration was continued"
    assert "not resumed" in caplog.text and "gate_requests" in caplog.text
    after = (old.dir / "requests.jsonl").read_bytes()
    fault_report(records_lost=int(before != after), records_mixed=int((old.dir / "requests-interrupted.jsonl").exists()))
    assert before == after
    RunRecord.open_incomplete(old.dir).release()  # released: a later resume of the same configuration may take it


HOSTILE_LINES = [b'{"kind": "gate", "stage": "gate", "index": 0, "text": "\xff\xfe"}',  # not UTF-8
                 b'[{"stage": "gate"}]',  # JSON, not an object
                 b'"a string"', b"null",
                 b'{"kind": "gate", "stage": ["gate"], "index": 1}',  # a stage that is not a name
                 b"[" * 100_000 + b'{"stage": "gate"}',  # nested too deep
                 b'{"kind": "gate", "stage": "gate", "ind']  # torn


@pytest.mark.fault
def test_a_resume_reads_hostile_request_lines_without_a_traceback(tmp_path: Path, fault_report) -> None:
    """An interrupted run's requests.jsonl with lines that are not what they claim: setting the
    unfinished stage aside and counting its answers go on, and every line stays, byte for byte."""
    manifest = golden_manifest()
    results = tmp_path / "results"
    rec = RunRecord.create(results, manifest)
    rec.record_request("gate", stage="gate", prompt_id="p", index=0, text="finished stage")
    rec.record_request("gate", stage="latency", prompt_id="p", index=0, text="unfinished stage")
    with rec.requests_path.open("ab") as fh:
        fh.write(b"\n".join(HOSTILE_LINES) + b"\n")
    rec.release()
    before = rec.requests_path.read_bytes().splitlines()
    plan = plan_arms("tiny", ["llamacpp"], "local", manifest.profile)[0]
    session = BenchSession(plan, results)
    session.record = RunRecord.open_incomplete(rec.dir)
    try:
        answered = session._answered("gate")
        moved = session.record.set_aside_unfinished({"gate"})
    except Exception as exc:  # noqa: BLE001 - measured below
        fault_report(tracebacks=1, records_lost=len(before))
        raise AssertionError(f"the resume raised {type(exc).__name__}") from None
    finally:
        session.record.release()
    kept = rec.requests_path.read_bytes().splitlines()
    aside = (rec.dir / "requests-interrupted.jsonl").read_bytes().splitlines()
    fault_report(records_lost=len(before) - len(kept) - len(aside),
                 records_mixed=sum(b"unfinished stage" in ln for ln in kept))
    assert answered == 1
    assert sorted(kept + aside) == sorted(before), "a line was lost or rewritten"
    assert kept == [before[0], *HOSTILE_LINES[1:4]]  # the finished stage's line, and JSON that names no stage
    assert moved == len(aside) == 5 and aside[0] == before[1] and HOSTILE_LINES[0] in aside


# ---------------------------------------------------------------- durability of a linked record


def test_the_run_folder_is_fsynced_after_a_record_is_linked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[tuple[str, object]] = []
    real_link, real_fsync = os.link, os.fsync

    def link(src, dst, *a, **k):
        real_link(src, dst, *a, **k)
        events.append(("link", Path(dst)))

    def fsync(fd):
        st = os.fstat(fd)
        events.append(("fsync", (st.st_dev, st.st_ino)))
        real_fsync(fd)

    monkeypatch.setattr(os, "link", link)
    monkeypatch.setattr(os, "fsync", fsync)
    path = tmp_path / "run" / "summary.json"
    write_once(path, "{}")
    folder = os.stat(path.parent)
    linked = events.index(("link", path))
    assert ("fsync", (folder.st_dev, folder.st_ino)) in events[linked + 1:], \
        "the folder is not synced after the record's name was linked in"


def test_lines_set_aside_are_durable_before_the_request_lines_are_replaced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash while a resume sets lines aside leaves each line in one file or both, never neither."""
    rec = RunRecord.create(tmp_path, golden_manifest().model_copy(update={"run_id": "r4"}))
    rec.record_request("gate", stage="gate", prompt_id="p", index=0, text="finished")
    rec.record_request("gate", stage="latency", prompt_id="p", index=0, text="unfinished")
    events: list[tuple[str, object]] = []
    real_replace, real_fsync = os.replace, os.fsync

    def replace(src, dst, *a, **k):
        real_replace(src, dst, *a, **k)
        events.append(("replace", Path(dst).name))

    def fsync(fd):
        real_fsync(fd)
        st = os.fstat(fd)
        events.append(("fsync", (st.st_dev, st.st_ino)))

    aside = rec.dir / "requests-interrupted.jsonl"
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "fsync", fsync)
    assert rec.set_aside_unfinished({"gate"}) == 1
    rec.release()
    node = lambda p: (os.stat(p).st_dev, os.stat(p).st_ino)  # noqa: E731
    replaced = events.index(("replace", "requests.jsonl"))
    assert ("fsync", node(aside)) in events[:replaced], "the lines set aside were not synced first"
    assert ("fsync", node(rec.requests_path)) in events[:replaced], "the new request lines were not synced"
    assert ("fsync", node(rec.dir)) in events[replaced + 1:], "the run folder was not synced after the swap"


def test_listing_runs_takes_no_lock_and_writes_nothing(tmp_path: Path) -> None:
    """`suite results` and the site read incomplete runs while a bench writes them: no lock is
    taken (the writer is not refused), no file appears, and a live run says it is under way."""
    from suite.records import load_all

    before = sorted(p for p in GOLDEN.rglob("*"))
    assert any(s.status == "incomplete" for s in load_all(GOLDEN))
    assert sorted(p for p in GOLDEN.rglob("*")) == before, "reading the golden records wrote into them"

    live = RunRecord.create(tmp_path, golden_manifest().model_copy(update={"run_id": "r3"}))
    (summary,) = load_all(tmp_path)
    assert summary.status == "incomplete" and "under way" in (summary.reason or "")
    live.record_request("gate", stage="gate", prompt_id="p", index=0, text="still writing")  # not refused
    live.release()
    (summary,) = load_all(tmp_path)
    assert "--resume" in (summary.reason or "")


# ---------------------------------------------------------------- live: a real llama-server


@pytest.mark.fault
@pytest.mark.live
def test_resume_continues_only_the_same_configuration(tmp_path: Path, fault_report) -> None:
    """llama-server on the tiny model: a run interrupted after its manifest is continued by a
    resume of the same configuration, and left alone (a new run starts) by one with more gate
    requests."""
    import shutil

    from conftest import installed_definition
    from suite.bench import BenchRequest, run_bench
    from suite.catalog import get_card, is_prepared
    from suite.records import load_summary

    installed_definition("llamacpp")
    if not is_prepared(get_card("tiny"), "gguf"):
        pytest.skip("the tiny GGUF is not prepared here (run `suite setup`)")
    results = tmp_path / "results"
    common = dict(arms=["llamacpp"], launcher="local", profile="quick", stages=["gate"], results=results)
    (done,) = run_bench(BenchRequest.build(model="tiny", gate_requests=2, **common))
    assert done.status == "complete", done.reason
    first = results / "tiny" / "llamacpp" / done.run_id
    # An interrupted twin: the same manifest, nothing else (a suite killed right after it began).
    twin = first.with_name("20000101T000000000000Z-interrupt")
    twin.mkdir()
    manifest = json.loads((first / "run.json").read_text())
    (twin / "run.json").write_text(json.dumps({**manifest, "run_id": twin.name}))
    def files(d: Path) -> dict[str, bytes]:  # the record's files (the owner lock file aside)
        return {str(p.relative_to(d)): p.read_bytes() for p in d.rglob("*") if p.is_file() and p.name != ".owner"}

    before = files(twin)

    (other,) = run_bench(BenchRequest.build(model="tiny", gate_requests=3, resume=True, **common))  # another configuration
    untouched = files(twin) == before
    (same,) = run_bench(BenchRequest.build(model="tiny", gate_requests=2, resume=True, **common))  # the twin's configuration
    fault_report(records_mixed=int(not untouched) + int(other.run_id == twin.name))
    assert untouched and other.run_id not in (twin.name, done.run_id) and other.status == "complete"
    assert same.run_id == twin.name and same.status == "complete", same.reason
    assert load_summary(twin / "summary.json").gate is not None
    shutil.rmtree(results)


@pytest.mark.fault
@pytest.mark.live
def test_resume_takes_up_the_rows_a_cut_matrix_finished(tmp_path: Path, fault_report) -> None:
    """llama-server on the tiny model: a control matrix cut inside its last row (no result, no
    summary, one request of that row kept) shows its two finished rows on the page, and `--resume`
    takes them up from their request lines and launches only the row that was cut; that row's lines
    from the interrupted launch go aside, the finished rows' stay."""
    from conftest import installed_definition
    from suite.bench import BenchRequest, run_bench
    from suite.catalog import get_card, is_prepared
    from suite.records import incomplete_summary

    installed_definition("llamacpp")
    if not is_prepared(get_card("tiny"), "gguf"):
        pytest.skip("the tiny GGUF is not prepared here (run `suite setup`)")
    results = tmp_path / "results"
    common = dict(arms=["llamacpp"], launcher="local", profile="quick", stages=["gate", "controls"], results=results,
                  # launch rows (a per-request control tried inside one launch is not rebuilt from lines)
                  stage_values={"controls": {"names": ["prompt-cache-off", "concurrency-4"], "in_launch": False}})
    (done,) = run_bench(BenchRequest.build(model="tiny", **common))
    assert done.status == "complete", done.reason
    assert [r.configuration for r in done.controls.rows] == ["default", "prompt-cache-off", "concurrency-4"]
    run = results / "tiny" / "llamacpp" / done.run_id
    # cut: as if stopped while the concurrency-4 row ran, after its first request
    (run / "summary.json").unlink()
    (run / "stages" / "controls.json").unlink()
    lines = (run / "requests.jsonl").read_text().splitlines()
    c4 = [i for i, ln in enumerate(lines) if json.loads(ln).get("label") == "concurrency-4"]
    (run / "requests.jsonl").write_text("".join(ln + "\n" for i, ln in enumerate(lines) if i not in c4[1:]))
    before = {k: sum(1 for ln in lines if json.loads(ln).get("stage") == "controls" and json.loads(ln)["label"] == k)
              for k in ("default", "prompt-cache-off")}

    shown = incomplete_summary(run).controls  # what the page reads before the resume
    assert shown is not None and [r.configuration for r in shown.rows] == ["default", "prompt-cache-off"]
    assert "cut mid-way and left out: concurrency-4 (1 requests)" in (shown.interrupted or "")

    (resumed,) = run_bench(BenchRequest.build(model="tiny", resume=True, **common))
    assert resumed.run_id == done.run_id and resumed.status == "complete", resumed.reason
    rows = {r.configuration: r for r in resumed.controls.rows}
    assert list(rows) == ["default", "prompt-cache-off", "concurrency-4"]
    assert rows["default"].startup_s is None and rows["prompt-cache-off"].startup_s is None  # taken up
    assert rows["concurrency-4"].startup_s is not None and rows["concurrency-4"].concurrency == 4  # launched again
    for k in ("default", "prompt-cache-off"):
        assert (rows[k].distinct, rows[k].answered) == (
            {p: d for p, d in next(r for r in done.controls.rows if r.configuration == k).distinct.items()},
            next(r for r in done.controls.rows if r.configuration == k).answered)
    assert "resumed: default, prompt-cache-off finished before the run was interrupted" in resumed.controls.interrupted
    kept = [json.loads(ln) for ln in (run / "requests.jsonl").read_text().splitlines()]
    aside = [json.loads(ln) for ln in (run / "requests-interrupted.jsonl").read_text().splitlines()]
    counts = {k: sum(1 for q in kept if q.get("stage") == "controls" and q["label"] == k) for k in before}
    lost = int(counts != before) + int([q["label"] for q in aside] != ["concurrency-4"])
    fault_report(records_lost=lost)
    assert counts == before and [q["label"] for q in aside] == ["concurrency-4"]
    assert sum(1 for q in kept if q.get("label") == "concurrency-4") == rows["concurrency-4"].gate.prompts[0].requests

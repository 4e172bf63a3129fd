"""The gate's answers come from the request lines: a summary whose kept answers disagree with its
lines is read as the lines say, and the disagreement is named beside the verdict."""

from __future__ import annotations

import json
import lzma
import shutil
from pathlib import Path

from suite.claims import claims_of
from suite.records import load_all

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def _copy_with_edit(tmp_path: Path, edit) -> Path:
    src = next((EXAMPLES / "cpu-results" / "tiny" / "llamacpp").iterdir())
    dst = tmp_path / "results" / "tiny" / "llamacpp" / src.name
    shutil.copytree(src, dst)
    f = dst / "requests.jsonl.xz"
    lines = [json.loads(x) for x in lzma.open(f).read().decode().splitlines()]
    f.write_bytes(lzma.compress(("\n".join(json.dumps(d) for d in edit(lines)) + "\n").encode()))
    return tmp_path / "results"


def test_an_edited_answer_in_the_lines_changes_the_verdict_and_is_named(tmp_path: Path) -> None:
    before = next(iter(load_all(_copy_with_edit(tmp_path / "a", lambda ls: ls))))
    assert not [r for r in before.recomputed if r.field == "answers"]  # the lines agree: nothing named

    def edit(lines):
        for d in lines:
            if d.get("kind") == "gate" and d.get("prompt_id") == "document-4k" and d.get("index") == 5:
                d["text"], d["token_ids"] = "an answer no request gave", [1, 2, 3]
        return lines

    s = next(iter(load_all(_copy_with_edit(tmp_path / "b", edit))))
    doc = next(p for p in s.gate.prompts if p.prompt_id == "document-4k")
    was = next(p for p in before.gate.prompts if p.prompt_id == "document-4k")
    assert doc.distinct_answers == was.distinct_answers + 1
    notes = [r for r in s.recomputed if r.field == "answers"]
    assert len(notes) == 1 and notes[0].now.startswith("document-4k: the summary kept")
    assert "its request lines say" in notes[0].now


def test_a_dropped_request_line_is_named_too(tmp_path: Path) -> None:
    def drop(lines):
        return [d for d in lines if not (d.get("kind") == "gate" and d.get("prompt_id") == "short-open"
                                         and d.get("index") == 19)]

    s = next(iter(load_all(_copy_with_edit(tmp_path, drop))))
    short = next(p for p in s.gate.prompts if p.prompt_id == "short-open")
    assert short.answered == 19
    assert any(r.field == "answers" and r.now.startswith("short-open") for r in s.recomputed)


def test_a_matrix_row_is_counted_from_its_lines(tmp_path: Path) -> None:
    """random-lightning's W4A16 matrix (two launches of the default row, the MoE kernel's row): a
    default answer edited in the lines adds a distinct answer to that row, named beside the verdict."""
    src = EXAMPLES / "gpu-lightning-results" / "random-lightning" / "vllm-gpu-w4a16" / "20261206T044243596625Z-442868b2"
    dst = tmp_path / "r" / "random-lightning" / "vllm-gpu-w4a16" / src.name
    shutil.copytree(src, dst)
    before = next(iter(load_all(tmp_path / "r")))
    row = next(r for r in before.controls.rows if r.configuration == "default")
    f = dst / "requests.jsonl.xz"
    lines = [json.loads(x) for x in lzma.open(f).read().decode().splitlines()]
    edited = False
    for d in lines:
        if not edited and d.get("kind") == "controls" and d.get("label") == "default" and d.get("prompt_id") == "short-open":
            d["text"], d["token_ids"], edited = "an answer no request gave", [7, 7, 7], True
    f.write_bytes(lzma.compress(("\n".join(json.dumps(d) for d in lines) + "\n").encode()))
    after = next(iter(load_all(tmp_path / "r")))
    again = next(r for r in after.controls.rows if r.configuration == "default")
    assert again.distinct["short-open"] == row.distinct["short-open"] + 1
    assert any(r.stage == "controls" and r.now.startswith("default on short-open: the summary kept")
               for r in after.recomputed)


def test_a_row_of_two_launches_is_counted_inside_each_launch_from_its_lines(tmp_path: Path) -> None:
    """random-lightning's NVFP4 matrix on the H100: the MoE emulation row's two launches gave one
    answer each on document-4k, different from each other. Its lines are cut into launches where the
    request numbers start again; one answer edited inside the second launch is a second answer
    inside a launch, and the credit goes."""
    src = EXAMPLES / "gpu-lightning-results" / "random-lightning" / "vllm-gpu-nvfp4" / "20261206T102852649047Z-9b81e573"
    dst = tmp_path / "r" / "random-lightning" / "vllm-gpu-nvfp4" / src.name
    shutil.copytree(src, dst)
    before = next(iter(load_all(tmp_path / "r")))
    row = next(r for r in before.controls.rows if r.configuration == "moe-nvfp4-emulation")
    assert [(c.answered, c.modal_count) for c in row.per_launch["document-4k"]] == [(20, 20), (20, 20)]
    assert len({c.modal for c in row.per_launch["document-4k"]}) == 2
    assert before.controls.restoring == ["moe-nvfp4-emulation"]
    f = dst / "requests.jsonl.xz"
    lines = [json.loads(x) for x in lzma.open(f).read().decode().splitlines()]
    seen = 0
    for d in lines:
        if d.get("label") == "moe-nvfp4-emulation" and d.get("prompt_id") == "document-4k" and d.get("index") == 7:
            seen += 1
            if seen == 2:  # the second launch's eighth request
                d["text"], d["token_ids"] = "an answer no request gave", [7, 7, 7]
    f.write_bytes(lzma.compress(("\n".join(json.dumps(d) for d in lines) + "\n").encode()))
    after = next(iter(load_all(tmp_path / "r")))
    again = next(r for r in after.controls.rows if r.configuration == "moe-nvfp4-emulation")
    assert [(c.answered, c.modal_count) for c in again.per_launch["document-4k"]] == [(20, 20), (20, 19)]
    assert after.controls.restoring == []
    assert any(r.stage == "controls" and r.now.startswith("moe-nvfp4-emulation on document-4k") for r in after.recomputed)


def test_a_restart_launch_is_counted_from_its_lines(tmp_path: Path) -> None:
    """The restarts' short gates come from their lines too: llama.cpp's launches each gave two
    answers per prompt (the prompt cache's first answer, then the rest); one later answer edited
    inside the second launch (kept caches) is a third answer in that launch, and the disagreement is
    named with its launch."""
    before = next(iter(load_all(_copy_with_edit(tmp_path / "a", lambda ls: ls))))
    assert before.restarts is not None
    assert next(p for p in before.restarts.prompts if p.prompt_id == "short-open").within_distinct == [2, 2, 2]
    assert not [r for r in before.recomputed if r.stage == "restarts" and r.field == "answers"]

    def edit(lines):
        for d in lines:
            if d.get("kind") == "restarts" and d.get("label") == "launch-1-kept" and d.get("prompt_id") == "short-open" \
                    and d.get("index") == 3:
                d["text"], d["token_ids"] = "an answer no request gave", [1, 2, 3]
        return lines

    s = next(iter(load_all(_copy_with_edit(tmp_path / "b", edit))))
    short = next(p for p in s.restarts.prompts if p.prompt_id == "short-open")
    assert short.within_distinct == [2, 3, 2]
    assert "cold-start transient" in before.restarts.within_verdict
    assert s.restarts.within_verdict != before.restarts.within_verdict
    notes = [r for r in s.recomputed if r.stage == "restarts" and r.field == "answers"]
    assert len(notes) == 1 and notes[0].now.startswith("kept caches, launch 1: short-open: the summary kept")


def test_sessions_are_made_from_their_lines(tmp_path: Path) -> None:
    """Study 2's sessions on random-llama-1b (6 sessions x 3 runs, base and adapter): the table and
    claims are made from the lines; one base answer edited in session 2's second run is a second
    output hash, named beside the verdict."""
    src = EXAMPLES / "gpu-vllm-results" / "random-llama-1b" / "vllm-gpu" / "20261202T191455954723Z-76fa8cd1"
    dst = tmp_path / "r" / "random-llama-1b" / "vllm-gpu" / src.name
    shutil.copytree(src, dst)
    before = next(iter(load_all(tmp_path / "r")))
    base = next(c for c in before.sessions.configurations if c.label == "base")
    assert base.runs is not None and (base.runs.runs, base.runs.distinct_runs) == (18, 1)
    assert not [r for r in before.recomputed if r.stage == "sessions"]
    f = dst / "requests.jsonl.xz"
    lines = [json.loads(x) for x in lzma.open(f).read().decode().splitlines()]
    for d in lines:
        if d.get("label") == "session-2-run-1-base":
            d["text"], d["token_ids"] = "an answer no request gave", [7, 7, 7]
    f.write_bytes(lzma.compress(("\n".join(json.dumps(d) for d in lines) + "\n").encode()))
    after = next(iter(load_all(tmp_path / "r")))
    again = next(c for c in after.sessions.configurations if c.label == "base")
    assert again.runs is not None and (again.runs.runs, again.runs.distinct_runs) == (18, 2)
    assert after.sessions.table[0].startswith("base: 2 distinct output hashes in 18 runs")
    notes = [r for r in after.recomputed if r.stage == "sessions"]
    assert len(notes) == 1 and notes[0].now.startswith("base: the summary kept 1 distinct output hash in 18 runs")
    claim = next(c for c in claims_of(after, only="sessions")
                 if c.configuration == "base")
    assert claim.verdict == "output hashes differ" and claim.good is False and claim.counts["distinct_runs"] == 2


def test_a_batch_target_is_counted_from_its_lines(tmp_path: Path) -> None:
    """The batch-invariant arm on random-llama-1b gave the one-at-a-time answer in every batch; one
    batched target answer edited in the lines is an answer never given alone: the verdict is no
    longer "the same in every batch", and the mode's disagreement is named."""
    src = EXAMPLES / "gpu-vllm-results" / "random-llama-1b" / "vllm-gpu-batch-invariant" / "20261201T220425746226Z-60b0249b"
    dst = tmp_path / "r" / "random-llama-1b" / "vllm-gpu-batch-invariant" / src.name
    shutil.copytree(src, dst)
    before = next(iter(load_all(tmp_path / "r")))
    assert before.batch is not None and before.batch.varies_with_batch is False
    assert not [r for r in before.recomputed if r.stage == "batch"]
    f = dst / "requests.jsonl.xz"
    lines = [json.loads(x) for x in lzma.open(f).read().decode().splitlines()]
    for d in lines:
        if d.get("kind") == "batch" and d.get("mode") == "mixed" and d.get("role") == "target" and d.get("trial") == 2:
            d["text"], d["token_ids"] = "an answer no request gave", [7, 7, 7]
    f.write_bytes(lzma.compress(("\n".join(json.dumps(d) for d in lines) + "\n").encode()))
    after = next(iter(load_all(tmp_path / "r")))
    mixed = after.batch.mode("mixed")
    assert mixed is not None and (mixed.target.distinct_answers, mixed.unseen_alone, mixed.differ_from_single) == (2, 1, 1)
    assert after.batch.varies_with_batch is None and after.batch.verdict.startswith("undetermined")
    notes = [r for r in after.recomputed if r.stage == "batch"]
    assert len(notes) == 1 and notes[0].now.startswith("mixed: the summary kept 1 distinct of 6 target answers")


FOURTH_H100 = EXAMPLES / "gpu-lightning-results" / "random-lightning" / "vllm-gpu-w4a16" / "20261206T140723762356Z-b4ee4d6f"


def test_restarts_a_run_stopped_in_are_rebuilt_from_the_launches_it_finished(tmp_path: Path) -> None:
    """random-lightning's W4A16 arm on a fourth H100: the device's time ended during the restarts
    (two launches with fresh caches answered; the kept pass's first launch had not answered yet).
    The incomplete run shows the gate, the complete extraction and the restarts' two launches,
    rebuilt from their request lines and said to be so; a launch cut mid-way is named and left out."""
    src = FOURTH_H100
    run = next(s for s in load_all(src.parents[2]) if s.run_id == src.name)
    assert run.status == "incomplete" and run.extraction is not None and run.extraction.requests == 24
    assert run.extraction.failed_requests == 0
    r = run.restarts
    assert r is not None and r.cache_mode == "fresh" and r.launched == 2 and r.with_kept_caches is None
    doc = next(p for p in r.prompts if p.prompt_id == "document-4k")
    assert doc.within_distinct == [5, 5] and r.stable_within is False
    assert r.interrupted and "fresh caches: 2 launches" in r.interrupted and "cut mid-way" not in r.interrupted
    assert r.caches_text == "compile caches not recorded"  # not in request lines: absent, not guessed

    dst = tmp_path / "r" / "random-lightning" / "vllm-gpu-w4a16" / src.name
    shutil.copytree(src, dst)
    f = dst / "requests.jsonl.xz"
    lines = [json.loads(x) for x in lzma.open(f).read().decode().splitlines()]
    last = [i for i, d in enumerate(lines) if d.get("label") == "launch-1-fresh"][-3:]
    f.write_bytes(lzma.compress(("\n".join(json.dumps(d) for i, d in enumerate(lines) if i not in last) + "\n").encode()))
    cut = next(iter(load_all(tmp_path / "r"))).restarts
    assert cut is not None and cut.launched == 1 and [o.index for o in cut.launch_outcomes] == [0]
    assert cut.interrupted and "cut mid-way and left out: fresh caches launch 1 (12 of 15 requests)" in cut.interrupted

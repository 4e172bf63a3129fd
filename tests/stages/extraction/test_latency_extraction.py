"""The latency, extraction and judge stages against a real runtime on the tiny model.

llama.cpp's `llama-server` when it is installed (it reports its own timings), else
llama-cpp-python's server. Quick profile, trimmed so that the tests stay short on a 2-core
machine: few requests and max_tokens <= 64.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from conftest import start_local
from suite.bench import make_signature, plan_arms
from suite.definitions import get_definition
from suite.launchers.base import RunningRuntime
from suite.launchers.local import is_installed
from suite.profiles import Profile, get_profile
from suite.records import RunManifest, RunRecord, new_run_id, utcnow
from suite.stages import StageContext, with_stage_settings
from suite.stages import extraction as ex
from suite.stages.extraction import judge_run as judge_stage  # the judge's run half: its grading
from suite.stages.extraction import run as extraction_run  # the run half: the requests it sends
import suite.stages.latency.run as lat  # the run half: the requests it sends, timed

pytestmark = pytest.mark.live

QUICK = get_profile("quick")


@pytest.fixture(scope="module")
def tiny_runtime(request: pytest.FixtureRequest, tiny_gguf: Path, tmp_path_factory) -> Iterator[tuple[str, RunningRuntime]]:
    if is_installed(get_definition("llamacpp")):
        yield "llamacpp", request.getfixturevalue("llamacpp_server")
        return
    rt = start_local("llamacpp-python", tiny_gguf, tmp_path_factory.mktemp("lcp"))
    with rt:
        yield "llamacpp-python", rt


def make_ctx(arm: str, rt: RunningRuntime, tmp: Path, **profile_changes) -> StageContext:
    plan = plan_arms("tiny", [arm], "local", "quick")[0]
    spec = plan.spec([], tmp / "unused.log")
    signature = make_signature(plan, rt, spec)
    manifest = RunManifest(run_id=new_run_id(signature.digest), model="tiny", arm=arm, runtime=plan.runtime.name,
                           launcher="local", profile="quick", started_at=utcnow(), signature=signature)
    record = RunRecord.create(tmp / "results", manifest)
    return StageContext(card=plan.card, arm_name=arm, arm=plan.arm, runtime=plan.runtime,
                        profile=Profile.model_validate(with_stage_settings({**QUICK.model_dump(), **profile_changes})),
                        sampling=plan.card.sampling,
                        signature=signature, record=record, client=plan.client(rt, []), running=rt, controls=[],
                        launch=None,  # type: ignore[arg-type]  (these stages never relaunch)
                        )


def requests_of(ctx: StageContext, kind: str) -> list[dict]:
    lines = (ctx.run_dir / "requests.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def test_latency_stage(tiny_runtime, tmp_path: Path):
    arm, rt = tiny_runtime
    ctx = make_ctx(arm, rt, tmp_path, latency_requests=4, latency_warmup=1, latency_max_tokens=24, concurrency=[1, 2])
    result = lat.run(ctx)
    assert [lv.concurrency for lv in result.levels] == [1, 2]
    for level in result.levels:
        done = level.requests - level.failed - level.incomplete
        assert level.requests == 4 and level.failed == 0 and done >= 1
        if level.concurrency == 1 or arm == "llamacpp":
            assert level.incomplete == 0
        # llama-cpp-python interrupts a running stream when another request arrives: those
        # streams end without a finish reason and are counted apart, not measured.
        assert level.ttft_s.n == done and level.e2e_s.n == done
        assert 0 < level.ttft_s.p50 <= level.e2e_s.p50
        assert level.ttft_s.p50 <= level.ttft_s.p90 <= level.ttft_s.p99 <= level.ttft_s.max
        assert level.tpot_s.n == done and level.tpot_s.mean > 0
        assert level.itl_s.n > 0
        assert level.output_tokens.mean == 24  # the prompt makes the model write past 24 tokens
        assert level.output_tokens_per_s.mean > 0
        assert level.overhead_ms.n == done and 0 < level.overhead_ms.p50 < 100
    if arm == "llamacpp":
        rt_t = result.levels[0].runtime_timings
        assert rt_t is not None and rt_t.source == "llama-server timings" and rt_t.n == 4
        # the runtime's TTFT is its prompt time: ours includes the HTTP exchange, so it is larger
        assert rt_t.ttft_diff_ms.n == 4 and rt_t.ttft_diff_ms.p50 > 0
        assert rt_t.tpot_mean_s > 0 and abs(rt_t.tpot_mean_diff_ms) < 0.5 * rt_t.tpot_mean_s * 1000
    measured = [r for r in requests_of(ctx, "latency") if not r["warmup"]]
    assert sum(bool(r.get("incomplete")) for r in measured) == sum(lv.incomplete for lv in result.levels)
    assert len(measured) == 8 and len(requests_of(ctx, "latency")) == 9
    assert all(r["signature_digest"] == ctx.signature.digest for r in measured)
    json.dumps(result.model_dump(mode="json"))  # serialisable for the summary


def test_extraction_stage_signs_every_fact(tiny_runtime, tmp_path: Path):
    arm, rt = tiny_runtime
    ctx = make_ctx(arm, rt, tmp_path, extraction_sections=1, extraction_repeats=2, extraction_max_tokens=64)
    result = extraction_run.run(ctx)
    section = ex.select_parts(1)[0]
    assert result.sections == 1 and result.repeats == 2 and result.requests == 2
    assert result.failed_requests == 0
    assert result.mode == ("json_schema" if arm == "llamacpp" else "json_object")
    if arm == "llamacpp-python":  # it refuses OpenAI's json_schema type: the stage fell back
        assert result.mode_rejections and "json_schema" in result.mode_rejections[0]
    assert result.facts_per_repeat == len(section.facts)
    assert 0 <= result.identical_sections <= 1
    row = result.per_section[0]
    # identical: the same facts in every repeat, each of them valid JSON (invalid repeats never count)
    assert row.identical == (row.distinct_answers == 1 and bool(row.comparable))
    assert row.comparable == (row.invalid_json == 0)
    assert len(result.per_repeat) == 2
    assert 0.0 <= result.recall.mean <= 1.0 and result.clean_share.n == 1
    assert result.invalid_json == sum(r.invalid_json for r in result.per_repeat)
    assert sum(t.facts for t in result.by_type.values()) == 2 * len(section.facts)

    asked = requests_of(ctx, "extraction")
    assert len(asked) == 2 and {r["repeat"] for r in asked} == {0, 1}
    facts = requests_of(ctx, "extraction-fact")
    assert len(facts) == 2 * len(section.facts)
    sig = ctx.signature
    for f in facts:
        assert f["signature_digest"] == sig.digest
        assert f["signature"]["model_sha256"] == sig.model_sha256
        assert f["signature"]["runtime"] == sig.runtime and f["signature"]["command"] == sig.command
        assert f["signature"]["prompt_set_hash"] == sig.prompt_set_hash
        assert f["verdict"] in ("correct", "wrong", "missing")
    json.dumps(result.model_dump(mode="json"))


def test_judge_grades_and_gates_itself(tiny_runtime, tmp_path: Path):
    """The tiny model as its own judge: the mechanics, not the quality, are under test."""
    arm, rt = tiny_runtime
    ctx = make_ctx(arm, rt, tmp_path, extraction_sections=1, extraction_repeats=1, extraction_max_tokens=64,
                   judge_repeats=2)
    ctx.reproducible = True  # grade the first repeat only
    sections = ex.select_parts(1)
    section = sections[0]
    obj = {f.key: f.canonical() for f in section.facts}
    from suite.analysis.scoring import score_part

    answers = {section.uid: [ex.Answer(section=section.uid, repeat=0, text=json.dumps(obj), extracted=obj,
                                       json_status="ok", score=score_part(section.facts, obj))]}
    ctx.judge = ctx.client
    result = judge_stage.grade(ctx, sections, answers, max_tokens=64)
    assert result.graded == 1 and result.graded_repeats == "first" and result.failed == 0
    assert result.gate is not None and result.gate.repeats == 2
    assert 1 <= result.gate.distinct_answers <= 2 or result.gate.failed == 2
    assert result.endpoint == rt.base_url and result.model == "tiny"
    graded = requests_of(ctx, "judge")
    assert len(graded) == 1 and graded[0]["text"] is not None
    assert graded[0]["gold_recall"] == pytest.approx(1.0)  # the answer given was the gold itself
    assert len(requests_of(ctx, "judge-gate")) == 2
    if result.invalid == 0:
        assert result.score.n == 1 and result.gold_score.mean == pytest.approx(1.0)

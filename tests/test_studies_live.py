"""The studies' designs on real runtimes of the tiny model: the extraction after a reload, restarts with
fresh and kept compile caches, and the process of elimination after a gate with more than one answer."""

from __future__ import annotations

from pathlib import Path

from suite.stages.controls import ControlRow, ControlsResult, eliminate
from suite.stages.gate import GateResult


def _gate(distinct: dict[str, int]) -> GateResult:
    from suite.analysis.repro import Sample, analyse
    from suite.stages.gate import GatePromptResult

    prompts = []
    for pid, d in distinct.items():
        samples = [Sample(index=i, text=str(i % d), token_ids=[i % d]) for i in range(4)]
        prompts.append(GatePromptResult.from_analysis(analyse(samples), prompt_id=pid, max_tokens=8))
    return GateResult(n_requests=4, seed=42, temperature=0.0, logprobs=False, prompts=prompts, reproducible=None,
                      verdict="", wall_s=1.0, http_s=1.0)


def _row(conf: str, distinct: dict[str, int], status: str = "ok") -> ControlRow:
    return ControlRow(configuration=conf, status=status, distinct=distinct, answered={k: 4 for k in distinct})


def test_elimination_names_the_control_that_brings_one_answer_back():
    result = ControlsResult(runtime="r", arm="a", requested=["all"], n_requests=4, prompts=["p", "q"], rows=[
        _row("default", {"p": 2, "q": 1}), _row("eager", {"p": 2, "q": 1}), _row("prefix-caching-off", {"p": 1, "q": 1}),
        _row("batch-invariant", {}, status="refused")])
    eliminate(result, _gate({"p": 2, "q": 1}))
    assert result.spread_prompts == ["p"]
    assert result.restoring == ["prefix-caching-off"]
    assert "prefix-caching-off bring(s) p back to one answer (of 2 controls that ran)" == result.elimination


def test_elimination_when_nothing_helps_or_nothing_varied():
    rows = [_row("default", {"p": 3}), _row("eager", {"p": 2}), _row("batch-invariant", {}, status="refused")]
    result = ControlsResult(runtime="r", arm="a", requested=["all"], n_requests=4, prompts=["p"], rows=rows)
    eliminate(result, _gate({"p": 3}))
    assert result.restoring == [] and "no control of the 1 that ran" in result.elimination
    assert "refused or failed: batch-invariant" in result.elimination
    eliminate(result, _gate({"p": 1}))
    assert "did not vary" in result.elimination


def test_reload_and_kept_caches_on_llama_server(tmp_path: Path, tiny_gguf: Path) -> None:
    from conftest import installed_definition
    from suite.bench import run_bench

    installed_definition("llamacpp")
    (s,) = run_bench("tiny", ["llamacpp"], "local", "quick", ["gate", "extraction", "restarts"], results=tmp_path,
                     overrides={"reloads": 1, "restart_caches": "both"})
    assert s.status == "complete", s.reason
    reloads = s.reloads
    assert reloads.reloads == 1 and reloads.outcomes[0].status == "ok"
    assert reloads.line.startswith(f"{reloads.within_identical} of {reloads.within_comparable} within, ")
    assert "after reload 1" in reloads.line
    restarts = s.restarts
    assert restarts.cache_mode == "fresh" and restarts.with_kept_caches.cache_mode == "kept"
    fresh = [o.cache_files_before for o in restarts.launch_outcomes]
    assert fresh == [0, 0]  # every fresh launch found an empty cache folder
    kept = restarts.with_kept_caches.launch_outcomes
    assert {o.cache_dir for o in kept} == {"kept/kept"}
    assert [o.cache_files_before for o in kept][0] == 0  # the first kept launch found it empty
    assert all(o.cache_settings == {"TRITON_CACHE_AUTOTUNING": "1"} for o in kept)
    # llama-server compiles no Triton/Inductor kernels: the page says nothing was kept, not "kept"
    later = [o.cache_files_before for o in kept][1:]
    text = restarts.with_kept_caches.caches_text
    assert ("nothing was kept" in text) if not all(later) else text.startswith("launches after the first found")
    run_dir = next(tmp_path.glob("tiny/llamacpp/*"))
    assert not (run_dir / "caches").exists()  # compile caches never bloat the record
    lines = (run_dir / "requests.jsonl").read_text().splitlines()
    assert sum('"reload": 0' in ln for ln in lines if '"kind": "extraction"' in ln) == reloads.sections


def test_control_rows_run_without_the_main_launchs_determinism_mode(tmp_path: Path, tiny_gguf: Path) -> None:
    """An arm whose determinism control was accepted: its `default` row must still run at default."""
    from conftest import installed_definition
    from suite.bench import plan_arms, run_arm

    installed_definition("llamacpp")
    (plan,) = plan_arms("tiny", ["llamacpp"], "local", "quick")
    plan.runtime = plan.runtime.model_copy(update={"determinism_control": "prompt-cache-off"})
    s = run_arm(plan, tmp_path, ["gate", "controls"], controls_request=["default", "prompt-cache-off"])
    assert s.determinism.outcome == "on" and s.signature.controls == ["prompt-cache-off"]
    rows = {r.configuration: r for r in s.controls.rows}
    assert rows["default"].ran_controls == []  # not the accepted determinism mode carried over
    assert rows["prompt-cache-off"].ran_controls == ["prompt-cache-off"]
    assert "cache_prompt" not in rows["default"].request_extra
    assert rows["prompt-cache-off"].request_extra.get("cache_prompt") is False

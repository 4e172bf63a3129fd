"""The studies' designs on real runtimes of the tiny model: the extraction after a reload, restarts with
fresh and kept compile caches, and the process of elimination after a gate with more than one answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite.stages.controls import MatrixRow, ControlMatrixResult, eliminate
from suite.stages.gate_models import GateResult


def _gate(others: dict[str, int], n: int = 20, label: str = "default", stop_at_second: bool = False) -> GateResult:
    """A gate of n requests per prompt, `others[pid]` of them a second answer (after the first)."""
    from suite.analysis.repro import Sample, analyse
    from suite.stages.gate_models import GatePromptResult

    prompts = []
    for pid, k in others.items():
        samples = [Sample(index=i, text="b" if 0 < i <= k else "a", token_ids=[2] if 0 < i <= k else [1])
                   for i in range(n)]
        if stop_at_second and k:
            samples = samples[:2]
        prompts.append(GatePromptResult.from_analysis(analyse(samples), prompt_id=pid, max_tokens=8))
    return GateResult(label=label, n_requests=n, seed=42, temperature=0.0, logprobs=False, prompts=prompts,
                      reproducible=None, verdict="", wall_s=1.0, http_s=1.0)


def _row(conf: str, others: dict[str, int], status: str = "ok", n: int = 20) -> MatrixRow:
    from suite.stages.controls import row_from_gate

    # a control row that gave one answer is launched a second time (the run's rule): two launches
    row = MatrixRow(configuration=conf, status=status,
                    launches=2 if conf != "default" and not any(others.values()) else 1)
    if status != "ok":
        return row
    return row_from_gate(row, _gate(others, n, conf, stop_at_second=conf != "default"))


def test_elimination_names_the_control_that_brings_one_answer_back():
    # default: 8 other answers in 20 on p; prefix-caching-off: one answer in 20 -> Fisher p ~ 0.002
    result = ControlMatrixResult(runtime="r", arm="a", requested=["all"], n_requests=20, prompts=["p", "q"], rows=[
        _row("default", {"p": 8, "q": 0}), _row("eager", {"p": 3, "q": 0}), _row("prefix-caching-off", {"p": 0, "q": 0}),
        _row("batch-invariant", {}, status="refused")])
    eliminate(result, _gate({"p": 8, "q": 0}))
    assert result.spread_prompts == ["p"]
    assert result.restoring == ["prefix-caching-off"]
    assert result.elimination.startswith("prefix-caching-off bring(s) p back to one answer (prefix-caching-off on p: "
                                         "one answer in 20 over 2 launches against 8 other answers in 20 at default")
    assert "one-sided Fisher's exact test" in result.elimination and "2 controls tested" in result.elimination
    eager = next(r for r in result.rows if r.configuration == "eager")
    assert eager.tests[0].stopped_early and "a second answer after 2 requests" in eager.tests[0].text


def test_elimination_when_nothing_helps_or_nothing_varied():
    rows = [_row("default", {"p": 12}), _row("eager", {"p": 5}), _row("batch-invariant", {}, status="refused")]
    result = ControlMatrixResult(runtime="r", arm="a", requested=["all"], n_requests=20, prompts=["p"], rows=rows)
    eliminate(result, _gate({"p": 12}))
    assert result.restoring == [] and "no control of the 1 that ran" in result.elimination
    assert "refused or failed: batch-invariant" in result.elimination
    eliminate(result, _gate({"p": 0}))
    assert "did not vary" in result.elimination


@pytest.mark.live
def test_reload_and_kept_caches_on_llama_server(tmp_path: Path, tiny_gguf: Path) -> None:
    from conftest import installed_definition
    from suite.bench import BenchRequest, run_bench

    installed_definition("llamacpp")
    (s,) = run_bench(BenchRequest.build(model="tiny", arms=["llamacpp"], launcher="local", profile="quick", stages=["gate", "extraction", "restarts"], results=tmp_path, stage_values={"reloads": {"launches": 1}, "restarts": {"caches": "both"}}))
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
    # llama-server's definition declares no compile cache: no cache env, no settings with it
    assert all(o.cache_settings == {} and o.cache_files == {} for o in kept)
    # llama-server compiles no Triton/Inductor kernels: the page says nothing was kept, not "kept"
    later = [o.cache_files_before for o in kept][1:]
    text = restarts.with_kept_caches.caches_text
    assert ("nothing was kept" in text) if not all(later) else text.startswith("launches after the first found")
    run_dir = next(tmp_path.glob("tiny/llamacpp/*"))
    assert not (run_dir / "caches").exists()  # compile caches never bloat the record
    lines = (run_dir / "requests.jsonl").read_text().splitlines()
    assert sum('"reload": 0' in ln for ln in lines if '"kind": "extraction"' in ln) == reloads.sections


@pytest.mark.live
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

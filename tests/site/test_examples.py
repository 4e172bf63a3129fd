"""The example results trees kept in docs/examples (real runs: the tiny model's three CPU arms in the
standard profile, llama.cpp's CUDA build on an H200, vLLM on an H200) read, publish and compare
with this suite's code."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from suite.compare import compare_runs
from suite.site.publish import build_site
from suite.records import expand_run, iter_run_dirs, load_all

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def _model_page(root: Path, tmp_path: Path, model: str) -> str:
    """The model page the suite publishes from an example tree."""
    build_site(root, tmp_path / "site")
    return (tmp_path / "site" / "models" / f"{model}.html").read_text(encoding="utf-8")


def test_cpu_example_tree_publishes_with_its_verdicts(tmp_path: Path) -> None:
    root = EXAMPLES / "cpu-results"
    runs = {s.arm: s for s in load_all(root)}
    assert set(runs) == {"llamacpp", "llamacpp-python", "vllm-cpu"}
    page = _model_page(root, tmp_path, "tiny")
    # the standard profile's bench, as `make bench` runs it from a fresh clone with an empty cache
    # (2026-12-02): llama-server's first answer after its start differs (its prompt cache) on every
    # prompt; its restarts show the same in each of three launches, which random order would rarely do
    assert "cold-start transient: only the first request after the start differs (1 of 20); the 19 after agree" in page
    assert "random order, or one switch placed at random in each, would put the odd answers there with p = 3.8e-06" in page
    # the process of elimination, over launches: prompt-cache-off removes it (0 of 3 against 3 of 3)
    assert "prompt-cache-off bring(s) document-4k, long-open, short-open back to one answer" in page
    assert "the first answer alone differed in 0 of 3 launches against 3 of 3 at default" in page
    # three launches alike: too few to bound how often a launch differs
    assert "3 of 3 launches alike, too few to bound how often a launch differs" in page
    a, b = (d for d in iter_run_dirs(root) if d.parent.name in ("llamacpp", "vllm-cpu"))
    cmp = compare_runs(str(a), str(b), root)
    assert cmp.prompts and any(d.key == "runtime" for d in cmp.signature_diff)


def test_gpu_example_tree_reads_as_200_identical_requests(tmp_path: Path) -> None:
    root = EXAMPLES / "gpu-results"
    (s,) = [s for s in load_all(root) if s.gate]
    (p,) = s.gate.prompts
    assert p.requests == 200 and p.distinct_answers == 1
    build_site(root, tmp_path / "site")


def test_gpu_vllm_example_tree_shows_the_batch_effect_and_its_removal(tmp_path: Path) -> None:
    """vLLM 0.24.0 on an H200, a random-weight Llama of 1B shape: default mode and batch-invariant
    mode, each with a 200-request gate and the batch-composition stage; then study 2 (sessions with
    a LoRA adapter) in runs of its own, 5 sessions on 2026-12-01 and 6 on 2026-12-02, the page
    showing the later. The default arm's bench was stopped during its control run: its gate and
    batch results stand on the page beside the sessions run, named as such."""
    root = EXAMPLES / "gpu-vllm-results"
    llama = [s for s in load_all(root) if s.model == "random-llama-1b"]
    runs = {(s.arm, s.status): s for s in llama if s.sessions is None}
    default = runs[("vllm-gpu", "incomplete")]
    invariant = runs[("vllm-gpu-batch-invariant", "complete")]
    sessions = max((s for s in llama if s.sessions is not None), key=lambda s: s.started_at)
    for s in (default, invariant):
        assert s.gate is not None and s.batch is not None
        (p,) = s.gate.prompts
        assert p.requests == 200 and p.distinct_answers == 1
    assert default.batch.varies_with_batch is True and invariant.batch.varies_with_batch is False
    assert sessions.sessions is not None and sessions.gate is None
    assert (sessions.sessions.sessions, sessions.sessions.launched, sessions.sessions.replicates) == (6, 6, 3)
    for c in sessions.sessions.configurations:  # base and adapter in the same processes
        assert c.status == "ok" and c.runs is not None and (c.runs.distinct_runs, c.runs.runs) == (1, 18)
    page = _model_page(root, tmp_path, "random-llama-1b")
    assert "random weights" in page
    assert "varies with batch composition: mixed: 3 distinct of 6" in page
    assert "the same answer in every batch: mixed 6, prefix 6" in page
    assert "x the J/token of vllm-gpu" in page
    assert f"vllm-gpu: gate from run {default.run_id} (incomplete" in page
    assert "1 distinct output hash in 18 runs" in page and "1 prompt each, 6 sessions" in page
    # what six alike sessions could have missed, before the 48-token cap
    assert ("6 of 6 sessions alike up to the cap (18 of 18 answers cut at max_tokens: they may differ past it); "
            "before the cap, a session that differs in more than 40% of starts would likely have shown") in page


def test_gpu_vllm_example_tree_shows_the_prefix_cache_transient_and_its_control(tmp_path: Path) -> None:
    """vLLM 0.24.0 on an H200, a random-weight Qwen3 of 1.7B shape: on document-4k (a 4K-token
    prompt) the first request after each start, the only one that computed the whole prompt before
    the prefix cache held it, gave another answer than the 19 after it; with prefix caching off
    every request gave that first answer. The restarts run (fresh compile caches) was cut after two
    launches: its request lines stand, and the page names the run as incomplete."""
    root = EXAMPLES / "gpu-vllm-results"
    runs = [s for s in load_all(root) if s.model == "random-qwen3"]
    (complete,) = [s for s in runs if s.status == "complete" and s.controls is not None
                   and s.controls.launches_per_row == 1]
    assert complete.gate is not None
    doc = next(p for p in complete.gate.prompts if p.prompt_id == "document-4k")
    assert (doc.requests, doc.distinct_answers, doc.pattern) == (20, 2, "cold-transient")
    assert [p.distinct_answers for p in complete.gate.prompts if p.prompt_id != "document-4k"] == [1, 1]
    off = next(r for r in complete.controls.rows if r.configuration == "prefix-caching-off")
    assert off.distinct["document-4k"] == 1 and off.answered["document-4k"] == 20
    page = _model_page(root, tmp_path, "random-qwen3")
    assert "random weights" in page
    # the page shows each arm's latest run of each stage: both arms' restarts are fresh-caches
    # runs (9 launch-prompt series each), the controls the elimination run's
    assert "in 3 launch-prompt series of 9, only the first request after the start differs" in page
    assert "compile-cache files at each launch's start: 0, 0, 0" in page
    assert "vllm-gpu: every launch started with empty compile caches" in page
    assert "vllm-gpu-triton-first-config: every launch started with empty compile caches" in page
    # the newest matrix tried prefix caching off inside one launch (the prefix cache emptied per request)
    assert "prefix-caching-off" in page and "unit: pairs of requests inside one launch" in page
    # the restarts run cut on 2026-12-02 (30 requests kept in its record): its two launches that
    # answered are rebuilt from their lines and said to be so; the later complete restarts run is
    # the one the page shows
    (cut,) = [s for s in runs if s.status != "complete" and s.restarts is not None]
    assert cut.run_id == "20261202T004546788983Z-7088587e"
    assert cut.restarts is not None and cut.restarts.launched == 2 and cut.restarts.interrupted
    assert "the launches it finished rebuilt from their request lines" not in page
    # what the records hold, tested again with this code: the control's one answer is the cold one
    from suite.stages.controls import eliminate

    eliminate(complete.controls, complete.gate)
    assert "so launches are the unit" in complete.controls.elimination
    assert "its one answer is the default row's first (cold) answer" in complete.controls.elimination


def test_gpu_vllm_example_tree_restarts_with_kept_caches_and_humming(tmp_path: Path) -> None:
    """Study 3 with kept compile caches on the random-weight Qwen3 (the first launch fills an empty
    cache root, the next two find its 637 files): the same answer sequence in every launch, the
    prefix cache's cold answer included, with identical log-probabilities; too few launches to
    bound how often one would differ. The HUMMING W4A16 arm (vLLM 0.24.0's pinned
    humming-kernels 0.1.6) on the random-weight Llama: 20 distinct answers in 20 on every gate
    prompt one request at a time, where the bf16 arm of the same weights gave one in 200."""
    root = EXAMPLES / "gpu-vllm-results"
    runs = load_all(root)
    (kept,) = [s for s in runs if s.model == "random-qwen3" and s.restarts is not None
               and s.restarts.cache_mode == "kept" and s.arm == "vllm-gpu"]
    r = kept.restarts
    assert r.launched == 3 and [o.cache_files_before for o in r.launch_outcomes] == [0, 637, 637]
    doc = next(p for p in r.prompts if p.prompt_id == "document-4k")
    assert doc.same_sequence and doc.across == "too few" and doc.cold_series == 3
    assert doc.across_logprob_diff == 0.0
    (humming,) = [s for s in runs if s.arm == "vllm-gpu-humming-w4a16" and s.status == "complete"
                  and s.controls is None]  # its gate alone (the matrix's run is tested below)
    assert humming.gate is not None and humming.gate.reproducible is False
    assert [(p.requests, p.distinct_answers, p.pattern) for p in humming.gate.prompts] == [(20, 20, "varies")] * 3
    page = _model_page(root, tmp_path, "random-llama-1b")
    assert "answers vary from request to request (20 distinct, 19 changes in 20; their order is not tested)" in page


def test_gpu_vllm_example_tree_restarts_with_fresh_compile_caches() -> None:
    """Study 3 with fresh compile caches to completion (random-qwen3, vLLM 0.24.0, H200,
    2026-12-02 11:56): three launches, each with an empty cache root (start-ups 105-122 s), gave
    the same answer sequence on every prompt, the prefix cache's cold answer on document-4k
    included, with identical log-probabilities; three launches bound nothing."""
    (run,) = [s for s in load_all(EXAMPLES / "gpu-vllm-results") if s.arm == "vllm-gpu"
              and s.restarts is not None and s.restarts.cache_mode == "fresh" and s.status == "complete"]
    r = run.restarts
    assert r.launched == 3 and [o.status for o in r.launch_outcomes] == ["ok"] * 3
    assert [o.cache_files_before for o in r.launch_outcomes] == [0, 0, 0]
    assert all(100 < (o.startup_s or 0) < 130 for o in r.launch_outcomes)
    doc = next(p for p in r.prompts if p.prompt_id == "document-4k")
    assert doc.same_sequence and doc.across == "too few" and doc.cold_series == 3
    assert doc.across_logprob_diff == 0.0
    assert all(p.same_sequence for p in r.prompts)
    assert "3 of 3 launches alike, too few to bound how often a launch differs" in r.verdict


def test_gpu_vllm_example_tree_eliminates_the_prefix_cache_transient_over_launches(tmp_path: Path) -> None:
    """The process of elimination on the GPU where the gate varied (random-qwen3, vLLM 0.24.0, H200,
    2026-12-02): the gate's document-4k gave its cold answer first and another on the 19 after;
    each control row is then three launches of a short gate, since a cold-start transient comes
    once per launch. At default the first answer alone differed in 3 of 3 launches, with prefix
    caching off in 0 of 3: the one-sided Fisher's exact test over launches gives p = 0.05, the
    least three launches a row can give, and the control is credited."""
    root = EXAMPLES / "gpu-vllm-results"
    (run,) = [s for s in load_all(root) if s.model == "random-qwen3" and s.controls is not None
              and s.controls.launches_per_row == 3]
    doc = next(p for p in run.gate.prompts if p.prompt_id == "document-4k")
    assert (doc.requests, doc.distinct_answers, doc.pattern) == (20, 2, "cold-transient")
    rows = {r.configuration: r for r in run.controls.rows}
    assert rows["default"].cold_odd == {"document-4k": [True, True, True]}
    assert rows["prefix-caching-off"].cold_odd == {"document-4k": [False, False, False]}
    assert rows["prefix-caching-off"].energy is not None and rows["prefix-caching-off"].energy.j_per_token > 0
    text = run.controls.elimination
    assert text.startswith("prefix-caching-off bring(s) document-4k back to one answer")
    assert "in 0 of 3 launches against 3 of 3 at default" in text and "p = 0.05 <= 0.05" in text
    page = _model_page(root, tmp_path, "random-qwen3")
    assert "prefix-caching-off bring(s) document-4k back to one answer" in page
    # the first screen: the arm's gate is its newest run's (the fresh-caches restarts of 2026-12-02
    # 11:56, whose gate sent 5 requests a prompt: 2 of 5 on document-4k, too few to call the first
    # answer a transient), and what changes it is the newest control matrix's finding, with its p
    # (one control tested: no family to correct for)
    index = (tmp_path / "site" / "index.html").read_text()
    qwen = index[index.index('id="model-random-qwen3"'):]
    row = qwen[qwen.index('<tr class="arm-row" data-arm="vllm-gpu">'):]
    row = row[:row.index("</tr>")]
    # since 2026-12-03 the newest matrix is the bench's own, tried inside one launch: its gate sent 20
    # requests a prompt, and prefix caching off is credited over the family of the 6 controls (the 5
    # launch rows not started), its cost the requests with it against those without in that launch
    assert "no</b>" in row and "2 of 20" in row
    assert "prefix-caching-off restores one answer (p = 0.0073, of 6 controls tested, Holm)" in row
    assert "0.94x the tokens/s" in row


def test_gpu_vllm_example_tree_compares_the_tiny_models_gpu_and_cpu_answers() -> None:
    """The tiny model's own weights (Gemma 3 270M) on vLLM 0.24.0 on an H200 (bf16 checkpoint derived
    there from the GGUF, with a tokenizer that reads the card's probe as llama.cpp does) against
    vLLM's CPU build here: both read every gate prompt as the same tokens, and the modal answers
    part on document-4k and long-open; the GPU arm shows the prefix cache's cold answer too."""
    from suite.compare import compare_runs

    gpu_root, cpu_root = EXAMPLES / "gpu-vllm-results", EXAMPLES / "cpu-results"
    (gpu,) = [d for d in (gpu_root / "tiny-gpu" / "vllm-gpu").iterdir() if d.name.startswith("20261202T0703")]
    (cpu,) = [d for d in (cpu_root / "tiny" / "vllm-cpu").iterdir() if (d / "run.json").exists()]
    out = compare_runs(str(cpu), str(gpu), cpu_root, across_models=True)
    by = {p.prompt_id: p for p in out.prompts}
    assert out.verdict.startswith("the same modal answer on 0 of 3 prompts")
    assert "different tokens" not in out.verdict
    assert by["long-open"].token_index == 19 and by["document-4k"].token_index == 1
    assert by["short-open"].caveat == "cap"
    (s,) = [s for s in load_all(gpu_root) if s.run_id == gpu.name]
    doc = next(p for p in s.gate.prompts if p.prompt_id == "document-4k")
    # 3,034 tokens: what llama.cpp's tokenizer reads (the checkpoint derived on 2026-12-02 at 03:58,
    # whose tokenizer failed the probe, read more than 8,065)
    assert (doc.distinct_answers, doc.pattern, doc.prompt_tokens) == (2, "cold-transient", [3034])


def test_a_cut_run_is_named_where_no_later_run_has_the_stage(tmp_path: Path) -> None:
    """The random-qwen3 records without the later complete restarts runs: the only restarts requests are
    those of the run cut during its third launch; its two launches that answered are rebuilt from
    their request lines, and the section says the run stopped there and what it rebuilt."""
    import shutil

    src = EXAMPLES / "gpu-vllm-results" / "random-qwen3" / "vllm-gpu"
    root = tmp_path / "results"
    for run in src.iterdir():
        if not run.name.startswith(("20261202T0346", "20261202T1158")):  # leave out the complete restarts runs
            shutil.copytree(run, root / "random-qwen3" / "vllm-gpu" / run.name)
    page = _model_page(root, tmp_path, "random-qwen3")
    assert ("vllm-gpu: the run stopped in the restarts: the launches it finished rebuilt from their request lines "
            "(fresh caches: 2 launches)") in page
    assert "2 of 2, 5 requests each" in page


def test_a_run_page_shows_the_stages_it_ran_that_it_does_not_draw_itself(tmp_path: Path) -> None:
    """A run's own page shows the batch composition, sessions and control matrix sections for that
    run alone (the sections the model page draws, one column), where the run has those results, and
    not where it has none."""
    root = EXAMPLES / "gpu-vllm-results"
    build_site(root, tmp_path / "site")
    runs = {s.run_id: s for s in load_all(root)}
    batch = [r for r in runs.values() if r.batch is not None]
    assert batch
    for s in batch:
        page = next((tmp_path / "site" / "runs").glob(f"{s.run_id}-*.html")).read_text()
        assert '<section id="batch">' in page and f"<th>{s.arm}</th>" in page
    sessions = [r for r in runs.values() if r.sessions is not None]
    assert sessions
    for s in sessions:
        page = next((tmp_path / "site" / "runs").glob(f"{s.run_id}-*.html")).read_text()
        assert '<section id="sessions">' in page
    controls = [r for r in runs.values() if r.controls is not None]
    assert controls
    for s in controls:
        page = next((tmp_path / "site" / "runs").glob(f"{s.run_id}-*.html")).read_text()
        assert '<section id="controls">' in page and "<h2>Control matrix</h2>" in page
        assert all(f"<td>{row.configuration}</td>" in page for row in s.controls.rows)
    plain = next(r for r in runs.values() if r.batch is None and r.sessions is None and r.controls is None)
    page = next((tmp_path / "site" / "runs").glob(f"{plain.run_id}-*.html")).read_text()
    assert '<section id="batch">' not in page and '<section id="sessions">' not in page
    assert '<section id="controls">' not in page
    assert "could not be drawn" not in page


def test_the_first_screen_keeps_an_arms_gate_when_a_study_ran_after_it(tmp_path: Path) -> None:
    """random-llama-1b's vllm-gpu: the 200-request gate ran in a bench cut during its batch stage
    (incomplete), then `suite study sessions` ran complete with no gate. The first screen's figure
    and verdict come from the gate's run, which the line names, not "gate not run"."""
    root = EXAMPLES / "gpu-vllm-results"
    build_site(root, tmp_path / "site")
    index = (tmp_path / "site" / "index.html").read_text()
    llama = index[index.index('id="model-random-llama-1b"'):]
    row = llama[llama.index('<tr class="arm-row" data-arm="vllm-gpu">'):]
    row = row[:row.index('<tr class="arm-row"', 10)]
    assert '<span class="distinct ok">1 of 200</span>' in row and "gate not run" not in row
    assert "yes</b>" in row and "1 distinct of 200" in row
    gate_run = next(s for s in load_all(root) if s.model == "random-llama-1b" and s.arm == "vllm-gpu"
                    and s.gate is not None)
    assert f"(gate of run <a href=\"runs/{gate_run.run_id}-vllm-gpu.html\">{gate_run.short_id}</a>, incomplete)" in row


def test_gpu_vllm_example_tree_humming_matrix_resumed_after_its_cut(tmp_path: Path) -> None:
    """The automatic control matrix on HUMMING W4A16 (random-llama-1b, vLLM 0.24.0, H200): the gate
    varied on every prompt, so the bench ran every control the runtime declares, one launch each;
    on 2026-12-02 14:57 the run was stopped by its time limit while the fourth row's runtime
    started, and at 19:22 `suite bench --resume` took up the three rows it had finished (from their
    request lines) and launched the other four. Batch-invariant mode brings short-open to one
    answer in 20 (against 20 in 20 at default, p = 1.5e-10) but not the two long prompts; no other
    control brings back any; with a LoRA adapter in the same process base and adapter requests
    vary as much as without."""
    root = EXAMPLES / "gpu-vllm-results"
    (run,) = [s for s in load_all(root) if s.arm == "vllm-gpu-humming-w4a16" and s.controls is not None]
    assert run.status == "complete" and run.gate is not None and run.gate.reproducible is False
    assert [(p.prompt_id, p.distinct_answers) for p in run.gate.prompts] == [
        ("document-4k", 19), ("long-open", 20), ("short-open", 20)]
    c = run.controls
    assert c.interrupted is not None and c.interrupted.startswith(
        "resumed: default, batch-invariant, triton-first-config finished before the run was interrupted")
    rows = {r.configuration: r for r in c.rows}
    assert list(rows) == ["default", "batch-invariant", "triton-first-config", "flashinfer-sampler-off",
                          "prefix-caching-off", "eager", "concurrency-4", "lora:base", "lora:adapter"]
    assert rows["default"].distinct == {"document-4k": 20, "long-open": 20, "short-open": 20}
    assert rows["batch-invariant"].distinct == {"document-4k": 2, "long-open": 2, "short-open": 1}
    assert rows["batch-invariant"].answered["short-open"] == 20
    short = next(t for t in rows["batch-invariant"].tests if t.prompt_id == "short-open")
    # one answer in 20 against 20 in 20 (p = 1.5e-10), but from one launch: today a credit rests on
    # two launches with the control (the record's row has one), so it is named, not credited
    assert not short.credited and short.p_value is not None and short.p_value < 1e-9
    assert "a credit rests on 2 launches with the control" in short.text
    for name in ("triton-first-config", "flashinfer-sampler-off", "prefix-caching-off", "eager"):
        # each gave a second answer at once, where the row stops
        assert rows[name].distinct == {"document-4k": 2, "long-open": 2, "short-open": 2}
    assert rows["concurrency-4"].distinct == {"document-4k": 4, "long-open": 4, "short-open": 4}
    assert rows["lora:base"].distinct == {"document-4k": 19, "long-open": 18, "short-open": 19}
    assert rows["lora:adapter"].distinct == {"document-4k": 17, "long-open": 18, "short-open": 20}
    # the rows launched by the resumed bench have their start-up and energy; the rebuilt ones none
    for name in ("flashinfer-sampler-off", "prefix-caching-off", "eager", "concurrency-4", "lora:base"):
        assert 60 < (rows[name].startup_s or 0) < 130 and rows[name].energy is not None
    assert all(rows[n].startup_s is None and rows[n].energy is None
               for n in ("default", "batch-invariant", "triton-first-config"))
    assert c.restoring == [] and c.elimination.startswith("no control of the 6 that ran is shown to bring")
    assert run.energy["controls"].j_per_token is not None
    # tested again with this code, which names a control that brings one prompt back on its own
    from suite.stages.controls import eliminate

    eliminate(c, run.gate)
    assert "on a prompt of its own" not in c.elimination
    assert "batch-invariant on short-open: one answer in 20 in one launch against 19 other answers in 20" in c.elimination
    assert "but a credit rests on 2 launches with the control" in c.elimination
    page = _model_page(root, tmp_path, "random-llama-1b")
    assert "batch-invariant: 2 distinct of 2; 2 distinct of 2; 1 distinct of 20 ·" in page


def test_gpu_vllm_example_tree_restarts_fresh_caches_with_triton_first_config() -> None:
    """Study 3 with fresh compile caches and Triton's autotuning pinned to its first configuration
    (VLLM_TRITON_FORCE_FIRST_CONFIG=1; random-qwen3, vLLM 0.24.0, H200, 2026-12-02 14:46): three
    launches from empty cache roots (start-ups 127-147 s) gave the same answer sequence on every
    prompt, as without the pin; three launches bound nothing."""
    (run,) = [s for s in load_all(EXAMPLES / "gpu-vllm-results") if s.arm == "vllm-gpu-triton-first-config"
              and s.restarts is not None and s.restarts.cache_mode == "fresh"]
    r = run.restarts
    assert run.status == "complete" and r.launched == 3
    assert [o.cache_files_before for o in r.launch_outcomes] == [0, 0, 0]
    assert all(120 < (o.startup_s or 0) < 150 for o in r.launch_outcomes)
    assert all(p.same_sequence and p.across == "too few" for p in r.prompts)
    assert next(p for p in r.prompts if p.prompt_id == "document-4k").cold_series == 3
    assert "3 of 3 launches alike, too few to bound how often a launch differs" in r.verdict
    assert run.energy["restarts"].j_per_token is not None and run.energy["restarts"].j_per_token > 10


def test_example_trees_are_kept_compacted_and_publish_as_their_plain_records(tmp_path: Path) -> None:
    """The example trees keep their request lines, stage files and summaries xz-compressed (a
    checkout light enough to travel with every GPU call; `tools/compact_records.py`); their pages
    are those of the plain records, byte for byte."""
    for tree in ("cpu-results", "gpu-results", "gpu-vllm-results"):
        runs = iter_run_dirs(EXAMPLES / tree)
        assert runs
        for run in runs:
            plain = [n for n in ("requests.jsonl", "summary.json") if os.path.lexists(run / n)]
            plain += [str(p.relative_to(run)) for p in (run / "stages").glob("*.json")]
            assert not plain, f"{run}: {plain} kept plain: run tools/compact_records.py {EXAMPLES / tree}"
    root = tmp_path / "plain"
    shutil.copytree(EXAMPLES / "cpu-results", root)
    for run in iter_run_dirs(root):
        assert expand_run(run)
    build_site(root, tmp_path / "site-plain")
    build_site(EXAMPLES / "cpu-results", tmp_path / "site-packed")
    files = sorted(p.relative_to(tmp_path / "site-plain") for p in (tmp_path / "site-plain").rglob("*") if p.is_file())
    assert len(files) > 5
    for rel in files:
        assert (tmp_path / "site-packed" / rel).read_bytes() == (tmp_path / "site-plain" / rel).read_bytes(), rel



def test_cpu_example_tree_shows_what_identical_repeats_do_to_the_facts(tmp_path: Path) -> None:
    """Per arm: the document parts whose verdict (clean and complete) flips between identical
    repeats, with its exact interval, the range of the arm's score over its repeats, and that
    spread against the gap between arms; each figure recomputed from the records."""
    import re

    from suite.stages.extraction.view import repeat_stability, spread_against_gap

    root = EXAMPLES / "cpu-results"
    runs = {s.arm: s for s in load_all(root)}
    stability = {arm: repeat_stability(s.extraction) for arm, s in runs.items() if s.extraction is not None}
    assert set(stability) == {"llamacpp", "llamacpp-python", "vllm-cpu"}
    for arm, st in stability.items():
        assert 0 <= st["flips"] <= st["flip_parts"] and st["flip_parts"] > 0, arm
        assert st["rerun_spread"] is not None and 0.0 <= st["rerun_spread"] <= 1.0, arm
    page = _model_page(root, tmp_path, "tiny")
    assert "verdict flips between identical repeats" in page and "rerun spread against the gap between arms" in page
    for arm, st in stability.items():
        assert f"<b>{st['flips']}</b> of {st['flip_parts']} parts" in page, arm
    arms = list(runs)
    rows = spread_against_gap([runs[a].extraction for a in arms], arms)
    assert len(rows) == 2 and all(r["text"] in page for r in rows)
    assert all(re.search(r"gap \d+\.\d points", r["text"]) for r in rows)


def test_gpu_lightning_tree_tries_a_kernel_part_and_records_the_refusal_and_the_machine(tmp_path: Path) -> None:
    """random-lightning on the lent H100 (2026-12-06): the W4A16 arm's MoE experts switched from
    Marlin's to Triton's WNA16 kernels by the suite's own override (vLLM 0.24.0 ignores
    --moe-backend there); that row's own start-up log names the Triton kernels, and it still gave a
    second answer on each prompt: the MoE kernel alone is ruled out. The batch-invariant arm's
    start was refused by the Mamba-2 layers, in the engine's words, where the fix would be; each
    record names the machine apart from its configuration."""
    root = EXAMPLES / "gpu-lightning-results"
    runs = [s for s in load_all(root) if s.run_id.startswith("20261206")]
    matrix = next(s for s in runs if s.run_id.endswith("-442868b2"))
    rows = {r.configuration: r for r in matrix.controls.rows}
    default, moe = rows["default"], rows["moe-wna16-triton"]
    assert default.kernel_path is not None and default.kernel_path["moe"] == "MARLIN (WNA16)"
    assert moe.kernel_path is not None and moe.kernel_path["moe"].startswith("Triton WNA16 fused MoE")
    assert moe.kernel_path["linear"] == default.kernel_path["linear"]  # one part changed, the others not
    assert moe.part == "moe" and moe.source.startswith("vllm 0.24.0: ")
    assert moe.env.get("SUITE_KERNEL_OVERRIDE") == "moe-wna16-triton"
    assert default.distinct["document-4k"] == 14 and default.distinct["long-open"] == 2
    assert all(moe.distinct[p] == 2 for p in ("document-4k", "long-open")) and matrix.controls.restoring == []
    refusal = next(s for s in runs if s.arm == "vllm-gpu-batch-invariant")
    assert refusal.determinism.outcome == "refused"
    assert "VLLM batch_invariant mode is not supported for MAMBA2_ATTN" in (refusal.determinism.error_line or "")
    for s in runs:
        m = s.signature.machine if s.signature is not None else None
        assert m is not None and m.gpu_names == ["NVIDIA H100 80GB HBM3"] and m.gpu_uuids[0].startswith("GPU-")
    # the second H100 (another machine, the same GPU model and driver): the matrix cut by the end of
    # its device time, its finished rows rebuilt from the request lines, each row's kernels from its
    # own start-up log in the run's logs
    cut = next(s for s in runs if s.run_id.endswith("-533f3335"))
    assert cut.status == "incomplete" and cut.controls is not None and cut.controls.interrupted
    rows = {r.configuration: r for r in cut.controls.rows}
    marlin = rows["linear-marlin"]
    assert rows["default"].kernel_path is not None
    assert rows["default"].kernel_path["linear"] == "MarlinLinearKernel + MacheteLinearKernel"
    assert marlin.kernel_path is not None and marlin.kernel_path["linear"] == "MarlinLinearKernel"
    assert marlin.part == "linear" and marlin.status == "ok" and cut.controls.restoring == []
    assert rows["default"].distinct["document-4k"] == 16 and marlin.distinct["document-4k"] == 2
    machines = {s.signature.machine.gpu_uuids[0] for s in runs if s.arm == "vllm-gpu-w4a16"
                and s.signature is not None and s.signature.machine is not None}
    # four H100s: the third ran the gate, the extraction and part of the restarts; the fourth the
    # attention and eager rows
    assert len(machines) == 4
    four = next(s for s in runs if s.run_id.endswith("-260407ae"))
    assert four.status == "complete" and four.controls is not None
    rows = {r.configuration: r for r in four.controls.rows}
    assert rows["default"].kernel_path is not None and rows["attention-triton"].kernel_path is not None
    assert rows["default"].kernel_path["attention"] == "FLASH_ATTN + FlashAttention 3"
    assert rows["attention-triton"].kernel_path["attention"] == "TRITON_ATTN"
    assert rows["attention-triton"].kernel_path["moe"] == rows["default"].kernel_path["moe"]
    assert rows["attention-triton"].distinct["document-4k"] == 2 and rows["eager"].distinct["document-4k"] == 2
    assert rows["default"].distinct["document-4k"] == 17 and four.controls.restoring == []
    page = _model_page(root, tmp_path, "random-lightning")
    # what changes it: both parts ruled out, each from its own run, on the first screen
    assert "the MoE layers&#39; kernels MARLIN (WNA16), with it Triton WNA16 fused MoE" in page
    assert "the linear layers&#39; kernels MarlinLinearKernel + MacheteLinearKernel, with it MarlinLinearKernel" in page
    assert "the attention kernels FLASH_ATTN + FlashAttention 3, with it TRITON_ATTN" in page
    assert "nothing of 4 controls tested restores it" in page and "rows from 3 runs of this arm" in page
    # machines, a dimension of their own: the two H100s of the W4A16 arm, compared
    machines = page[page.index('<section id="machines">'):]
    machines = machines[:machines.index("</section>")]
    assert all(f"GPU-{u}…" in machines for u in ("71c33d2f", "d8a925a9", "3037372f", "ac7d6d01"))
    # the third H100's host ran another kernel build (hardware.os): a configuration of its own, said so
    assert "their configurations differ (see the fields that differ)" in machines
    assert "two machines of one GPU model and driver" in machines and "one configuration (the same digest)" in machines
    assert "NVIDIA H200 (which card not recorded" in machines
    assert "no batch-invariant mode for this model: RuntimeError: VLLM batch_invariant mode is not supported for " \
           "MAMBA2_ATTN." in page

"""The latency section says whether TTFT includes prompt processing; old records still render."""

from __future__ import annotations

from pathlib import Path

from suite.site.figures import load_runs
from suite.stages.latency.view import metric_label
from suite.site.publish import _run_sections, _Site

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "results"


def _a_run_with_latency():
    models = load_runs(GOLDEN)
    for m in models.values():
        for arm in m.arms.values():
            for run in arm.runs:
                if run.s.latency:
                    return m, run
    raise AssertionError("no golden run has a latency result")


def _render_run(model, run, out: Path) -> str:
    """The run's page as the site writes it: its stages' sections (the latency's among them) in it."""
    site = _Site(out)
    try:
        parts = _run_sections(site, run)
        assert not site.section_problems
        return site.env.get_template("run.html").render(
            root="../", model=model, run=run, generated="now", controls=None, watchdog=None, stage_parts=parts)
    finally:
        site.close()


def test_old_record_says_ttft_may_be_a_cache_hit(tmp_path: Path) -> None:
    model, run = _a_run_with_latency()
    latency = run.s.latency.model_copy(update={"prompt_cache": None, "prompt_prefix": None})
    run = type(run)(summary=run.s.model_copy(update={"latency": latency}), run_dir=run.run_dir,
                    headline=run.headline, page=run.page)
    html = _render_run(model, run, tmp_path)
    assert "likely a prompt-cache hit" in html


def test_unique_prefix_record_says_ttft_includes_prompt_processing(tmp_path: Path) -> None:
    model, run = _a_run_with_latency()
    latency = run.s.latency.model_copy(update={"prompt_cache": "unique-prefix", "prompt_prefix": "Request {index:04d}: "})
    run = type(run)(summary=run.s.model_copy(update={"latency": latency}), run_dir=run.run_dir,
                    headline=run.headline, page=run.page)
    html = _render_run(model, run, tmp_path)
    assert "TTFT includes prompt processing" in html
    assert "Request {index:04d}: " in html


def test_new_latency_fields_have_labels_and_units() -> None:
    assert metric_label("stream_close_s", "s") == ("Request to the stream's close", "ms", 1000.0)
    assert metric_label("prompt_tokens", "tokens") == ("Prompt tokens per request", "tokens", 1.0)
    assert metric_label("prompt_cached_tokens", "tokens")[1] == "tokens"
    assert metric_label("e2e_s", "s")[0] == "End-to-end (to the last token)"
    assert metric_label("runtime_timings.ttft_diff_ms", "ms") == (
        "Time to first token: ours − the runtime's own", "ms", 1.0)


def test_model_page_and_every_stage_section_template_parse() -> None:
    from suite.stages import STAGES
    from suite.stages.base import SectionTemplate

    from suite.site.publish import make_env

    env = make_env()
    assert "TTFT includes prompt processing" in env.loader.get_source(env, "latency/section.html")[0]
    env.get_template("model.html")
    sections = [f"{s.name}/{s.section.template}" for s in STAGES.values() if isinstance(s.section, SectionTemplate)]
    assert len(sections) == 7  # every built-in stage with a page part, the gate and the latency among them
    for name in sections:  # a syntax error in a stage's section fails here
        env.get_template(name)


def test_model_page_says_which_arm_had_unique_prompts(tmp_path: Path) -> None:
    import json
    import shutil

    from suite.site.publish import build_site

    results = tmp_path / "results"
    shutil.copytree(GOLDEN, results)
    summary = next(results.glob("tiny/vllm-cpu/*/summary.json"))
    summary.chmod(0o644)
    data = json.loads(summary.read_text())
    data["latency"].update(version=2, prompt_cache="unique-prefix", prompt_prefix="Request {index:04d}: ")
    summary.write_text(json.dumps(data))
    build_site(results, tmp_path / "public")
    page = next(p for p in (tmp_path / "public").rglob("*.html")
                if "vllm-cpu: every request" in p.read_text(encoding="utf-8"))
    html = page.read_text(encoding="utf-8")
    assert "TTFT includes prompt processing" in html
    assert "llamacpp: one repeated prompt" in html  # the old records of the other arms say so

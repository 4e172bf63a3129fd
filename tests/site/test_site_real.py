"""The website built from a real run: `suite bench` on the tiny model with llama.cpp's server.

The run is real (llama-server on the Gemma 3 270M GGUF, the watchdog sampling); to keep the test
short it runs the gate and latency stages of the quick profile. `SUITE_SITE_RESULTS` may name a
results folder a real `suite bench` wrote already (for instance a full quick run): the test then
builds from it instead of running the bench. The pages are read in headless Chromium and their
figures compared with the run's own records.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suite.records import read_requests
from suite.site.figures import gate_prompts
from suite.site.publish import build_site, fmt_num
from suite.records import load_all

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from browser import Browser, find_chromium  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def real_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("SUITE_SITE_RESULTS")
    if given:
        return Path(given)
    from suite.definitions import get_definition
    from suite.launchers.local import is_installed

    if not is_installed(get_definition("llamacpp")):
        pytest.skip("llama.cpp's server is not installed here (run `suite setup`)")
    results = tmp_path_factory.mktemp("real") / "results"
    cli = Path(sys.executable).parent / "suite"
    proc = subprocess.run(
        [str(cli), "bench", "--model", "tiny", "--profile", "quick", "--arms", "llamacpp",
         "--stages", "gate,latency"],
        cwd=REPO, env=dict(os.environ, RESULTS=str(results)), capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return results


@pytest.fixture(scope="module")
def real_site(real_results: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("real-site") / "public"
    report = build_site(real_results, out)
    assert report.runs >= 1 and report.pages >= 4
    return out


def test_real_run_pages(real_results: Path, real_site: Path, tmp_path: Path) -> None:
    if find_chromium() is None:
        pytest.fail("no Chromium here: run .ci/browser-setup.sh (installs Debian's chromium)")
    summary = next(s for s in reversed(load_all(real_results)) if s.arm == "llamacpp")
    assert summary.status == "complete", summary.reason
    shots = Path(os.environ.get("SUITE_SCREENSHOTS") or tmp_path)
    with Browser() as browser:
        index = browser.open((real_site / "index.html").as_uri())
        assert index.console_errors() == []
        index.screenshot(shots / "real-index.png")
        row = index.eval("""(() => { const r = document.querySelector('tr.arm-row[data-arm="llamacpp"]');
            return {distinct: r.querySelector('[data-fig=distinct] span.distinct').innerText.trim(),
                    ttft: r.querySelector('[data-fig=ttft]').innerText.trim(),
                    tps: r.querySelector('[data-fig=tps]').innerText.trim()}; })()""")
        prompts = gate_prompts(summary.gate)
        worst = max(p.distinct for p in prompts)
        assert row["distinct"] == f"{worst} of {max(p.n for p in prompts)}"
        level = summary.latency.levels[0]
        assert row["ttft"] == fmt_num(level.ttft_s.p50 * 1000)
        assert row["tps"] == fmt_num(level.output_tokens_per_s.p50)

        page = browser.open((real_site / "models" / "tiny.html").as_uri())
        assert page.console_errors() == []
        page.screenshot(shots / "real-model-tiny.png")
        text = page.text()
        for p in prompts:
            assert p.lengths_text in text
        assert page.eval("document.querySelectorAll('figure.chart svg').length") == 3  # TTFT, ITL, memory
        assert page.eval("document.scripts.length") == 0

        # the answer page shows every distinct answer the run recorded, as text, with its count
        run_dir = real_results / "tiny" / "llamacpp" / summary.run_id
        gate_texts = [q.text for q in read_requests(run_dir, ["gate"]) if q.prompt_id == prompts[0].prompt_id]
        answers = browser.open((real_site / "models" / "tiny" / f"gate-{prompts[0].prompt_id}.html").as_uri())
        assert answers.console_errors() == []
        answers.screenshot(shots / "real-answers.png")
        shown = answers.eval("[...document.querySelectorAll('pre.answer-text')].map(p => p.textContent)")
        counts = answers.eval("[...document.querySelectorAll('.answer-head b')].map(b => b.innerText)")
        assert sorted(set(shown)) == sorted(set(gate_texts))
        assert sorted(counts) == sorted(f"×{gate_texts.count(t)}" for t in shown)

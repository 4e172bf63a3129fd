"""What the pages say, from the records: denominators, labels and the studies' tables.

Pages rendered by the site's own templates from constructed records and from the golden tree,
read as HTML (the browser tests in test_site open the same pages in Chromium).
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from suite.analysis.repro import Sample, analyse
from suite.site import figures
from suite.site.publish import build_site, make_env
from suite.stages.gate_models import GatePromptResult, GateResult

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "results"


def _text(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def _prompt(pid: str, answers: list[int | None], process_cold: bool = True) -> GatePromptResult:
    samples = [Sample(index=i, text=str(a), token_ids=[a]) if a is not None else Sample(index=i, error="HTTP 500")
               for i, a in enumerate(answers)]
    return GatePromptResult.from_analysis(analyse(samples, process_cold=process_cold), prompt_id=pid,
                                          max_tokens=16)


def _gate(*prompts: GatePromptResult, concurrency: int = 1, seed: int | None = 42) -> GateResult:
    return GateResult(n_requests=len(prompts[0].answers), seed=seed, temperature=0.0, logprobs=False,
                      prompts=list(prompts), reproducible=None, verdict="", wall_s=0.0, http_s=0.0,
                      concurrency=concurrency)


def test_the_headline_is_distinct_of_answered_with_the_requests_beside_it():
    # 20 requests, 15 failed: one answer of 5 is not "1 of 20"
    summary = SimpleNamespace(gate=_gate(_prompt("p", [1] * 5 + [None] * 15)), latency=None, extraction=None)
    h = figures.headline(summary)  # type: ignore[arg-type]
    assert (h.distinct, h.answered, h.n) == (1, 5, 20)
    assert h.distinct_text == "1 of 5 answered (20 requests)"
    # two prompts: the count and the denominator come from the same prompt
    summary.gate = _gate(_prompt("a", [1, 2] + [None] * 4), _prompt("b", [1, 2, 2, 2, 2, 2]))
    h = figures.headline(summary)  # type: ignore[arg-type]
    assert h.distinct_text == "2 of 2 answered (6 requests)"
    summary.gate = _gate(_prompt("a", [1] * 6))
    assert figures.headline(summary).distinct_text == "1 of 6"  # type: ignore[arg-type]


def test_the_answers_page_tags_cold_and_modal_only_where_they_hold(tmp_path: Path):
    env = make_env()
    model = SimpleNamespace(name="tiny", page="models/tiny.html", random_weights=False)
    run = SimpleNamespace(s=SimpleNamespace(arm="llamacpp", runtime="llamacpp", run_id="r1"))
    # a later prompt (not process-cold) whose two answers are tied 2 : 2
    tied = figures.prompt_view(_prompt("long-open", [1, 2, 1, 2], process_cold=False), "long-open")
    page = env.get_template("answers.html").render(root="../", model=model, prompt_id="long-open", arms=["llamacpp"],
                                                   runs=[run], gate=[tied], generated="now")
    assert tied.modal_tied and not tied.process_cold
    assert '<span class="tag">cold</span>' not in page  # before: request 1 of every prompt was "cold"
    assert '<span class="tag">modal</span>' not in page  # before: the first of a tie was "modal"
    assert "tied: listed first, not modal" in page and "departs from the first-listed answer" in page
    cold = figures.prompt_view(_prompt("short-open", [9, 1, 1, 1]), "short-open")
    page = env.get_template("answers.html").render(root="../", model=model, prompt_id="short-open", arms=["llamacpp"],
                                                   runs=[run], gate=[cold], generated="now")
    assert page.count('<span class="tag">cold</span>') == 1 and page.count('<span class="tag">modal</span>') == 1


def test_gate_settings_come_from_the_records():
    one = _gate(_prompt("p", [1]))
    assert figures.gate_settings_text([one, None], ["a", "b"]) == "one request at a time, temperature 0, seed 42"
    four = _gate(_prompt("p", [1]), concurrency=4, seed=None)
    assert figures.gate_settings_text([one, four], ["a", "b"]) == (
        "a: one request at a time, temperature 0, seed 42; b: 4 requests at once, temperature 0, no seed")
    assert figures.gate_settings_text([None]) is None


@pytest.fixture(scope="module")
def golden_site(tmp_path_factory) -> Path:
    """The golden tree, llama-cpp-python's extraction recorded with its comparable sections: 8
    identical of 10 with valid JSON in every repeat, 12 asked."""
    root = tmp_path_factory.mktemp("golden")
    shutil.copytree(GOLDEN, root / "results")
    (target,) = (root / "results" / "tiny" / "llamacpp-python").glob("*/summary.json")
    data = json.loads(target.read_text())
    data["extraction"].update(identical_sections=8, comparable_sections=10, invalid_sections=2)
    # 4 of the first prompt's 36 answers over six launches stopped at the cap: said in the launches'
    # own answers (the pages recompute the stage's figures from them, never from its summary)
    pid = data["restarts"]["prompts"][0]["prompt_id"]
    for outcome in data["restarts"]["launch_outcomes"][:4]:
        prompt = next(p for p in outcome["gate"]["prompts"] if p["prompt_id"] == pid)
        prompt["answers"][0]["truncated"] = 1
    target.write_text(json.dumps(data))
    build_site(root / "results", root / "site")
    return root / "site"


def test_model_page_shows_the_studies_from_their_records(golden_site: Path):
    text = _text((golden_site / "models" / "tiny.html").read_text(encoding="utf-8"))
    # study 2: runs over the prompt set, each measure named, the interval over sessions
    assert "base : 1 distinct output hash in 24 runs" in text
    assert "adapter : 24 distinct output hashes in 24 runs" in text
    assert "item-level (share of prompts answered identically in a pair of runs)" in text
    assert "token-level (share of token positions before the first difference" in text
    assert "every one of the 252 pairs of runs from two sessions agrees" in text  # no [1.000, 1.000]
    assert "first run differs" not in text
    # the gate's settings as the records have them; controls beside restarts and sessions
    assert "(one request at a time, temperature 0, seed 42, as the records say)" in text
    assert "controls:" in text
    # the reload compared over stable sections only
    assert "10 of 12 within, 10 of 10 after reload 1" in text


def test_run_page_and_model_page_count_identical_sections_alike(golden_site: Path):
    model = _text((golden_site / "models" / "tiny.html").read_text(encoding="utf-8"))
    assert "8 of 10 with valid JSON in every repeat" in model
    (page,) = (golden_site / "runs").glob("20261128T090500*-llamacpp-python.html")
    run = _text(page.read_text(encoding="utf-8"))
    # before: "8 of 12 sections identical" on the run page beside "8 of 10" on the model page
    assert "8 of 10 document parts identical across repeats (of those with valid JSON in every repeat; 12 document parts asked)" \
        in run


def test_truncation_in_restarts_is_shown_on_both_pages(golden_site: Path):
    model = _text((golden_site / "models" / "tiny.html").read_text(encoding="utf-8"))
    (page,) = (golden_site / "runs").glob("20261128T090500*-llamacpp-python.html")
    run = _text(page.read_text(encoding="utf-8"))
    # before: computed into the record, shown nowhere
    assert re.search(r"4 of 36 cut at \d+ tokens: answers may differ past the cap", model)
    assert re.search(r"\(4 of 36 cut at \d+ tokens\)", run)
    assert "every launch started with empty compile caches" in run or "compile caches not recorded" in run


def test_control_matrix_cells_are_coloured_by_their_answers(golden_site: Path) -> None:
    html = (golden_site / "models" / "tiny.html").read_text(encoding="utf-8")
    section = html[html.index('<section id="controls">'):html.index('<section id="restarts">')]
    assert 'class="matrix-one"' in section and 'class="matrix-many"' in section
    # a cell is red exactly when one of its prompts shows more than one answer
    for cell in re.findall(r'<td class="matrix-(one|many|none)">(.*?)</td>', section, flags=re.S):
        kind, body = cell
        counts = [int(x) for x in re.findall(r'<span class="distinct (?:ok|bad)"><b>(\d+)</b>', body)]
        assert kind == ("many" if any(c > 1 for c in counts) else "one" if counts else "none"), body[:200]

"""The first screen answers three questions per arm: does it give the same answer twice (a request
strip per gate prompt), what changes it, and what the fix costs; drawn from the arm's claims and
visible without scrolling at 1280 x 900 on every example tree's index and model pages."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from suite.site.publish import build_site

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
TREES = ("cpu-results", "gpu-results", "gpu-vllm-results", "gpu-lightning-results")
VIEWPORT = (1280, 900)


def _rows(page: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r'<tr class="arm-row" data-arm="([^"]+)">(.*?)</tr>', page, re.S)}


def _cell(row: str, fig: str) -> str:
    m = re.search(rf'data-fig="{fig}">(.*?)</td>', row, re.S)
    assert m, fig
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", m.group(1))).split())


def test_each_arm_answers_three_questions_with_a_strip_per_prompt(tmp_path: Path) -> None:
    build_site(EXAMPLES / "cpu-results", tmp_path / "site")
    page = (tmp_path / "site" / "index.html").read_text()
    rows = _rows(page)
    assert set(rows) == {"llamacpp", "llamacpp-python", "vllm-cpu"}
    # llama-server gave 2 answers in 20 on each prompt: its first request after the start differed,
    # and the strip shows it: the first mark another colour than the 19 after it
    assert _cell(rows["llamacpp"], "distinct").startswith("no 2 of 20")
    strips = re.findall(r'<span class="marks[^"]*">(.*?)</span>', rows["llamacpp"], re.S)
    assert len(strips) == 3
    for s in strips:
        assert re.findall(r'<i class="(\w+)">', s) == ["a1"] + ["a0"] * 19
    # three controls tested over launches of 3: Holm over them does not credit prompt-cache-off's
    # 3 of 3 against 0 of 3 (p = 0.05, adjusted 0.1), and the cell says it passed alone
    assert _cell(rows["llamacpp"], "changes").startswith(
        "nothing of 3 controls tested restores it (prompt-cache-off only without the correction)")
    assert _cell(rows["vllm-cpu"], "distinct").startswith("yes 1 of 20")
    assert _cell(rows["vllm-cpu"], "changes").startswith("nothing varied")
    assert _cell(rows["vllm-cpu"], "cost") == "nothing to fix"


def test_a_fix_and_its_cost_come_from_the_crediting_configuration(tmp_path: Path) -> None:
    """On the GPU tree: batch-invariant mode removes the batch effect default vLLM shows, and the
    default arm's cost cell names it with its tokens/s against the default's (the gate's figures)."""
    build_site(EXAMPLES / "gpu-vllm-results", tmp_path / "site")
    page = (tmp_path / "site" / "index.html").read_text()
    llama = page[page.index('id="model-random-llama-1b"'):page.index('id="model-random-qwen3"')]
    rows = _rows(llama)
    assert _cell(rows["vllm-gpu"], "changes").startswith("its batch: varies with its batch (12 of 12 batched answers")
    assert re.match(r"vllm-gpu-batch-invariant: 0\.\d\dx the tokens/s", _cell(rows["vllm-gpu"], "cost"))
    assert _cell(rows["vllm-gpu-batch-invariant"], "changes").startswith("its batch: the same in every batch")


@pytest.fixture(scope="module")
def browser():
    from browser import Browser, BrowserError, find_chromium

    if find_chromium() is None:
        pytest.skip("no Chromium (make test installs Debian's)")
    try:
        b = Browser()
    except BrowserError as exc:
        pytest.skip(str(exc))
    yield b
    b.close()


@pytest.mark.parametrize("tree", TREES)
def test_the_three_answers_of_every_arm_are_in_the_first_viewport(tree: str, tmp_path: Path, browser) -> None:
    out = tmp_path / "site"
    build_site(EXAMPLES / tree, out)
    pages = [out / "index.html", *sorted((out / "models").glob("*.html"))]
    for path in pages:
        page = browser.open(path.as_uri(), *VIEWPORT)
        if path.name == "index.html":
            cells = page.eval("""[...document.querySelectorAll('tr.arm-row')].map(r => ({
                arm: r.dataset.arm,
                tops: ['distinct', 'changes', 'cost'].map(f => r.querySelector(`[data-fig=${f}]`).getBoundingClientRect().top)}))""")
        else:
            cells = page.eval("""[...document.querySelectorAll('.arm-card')].map(c => ({
                arm: c.querySelector('h3').innerText,
                tops: [...c.querySelectorAll('.three .q')].map(q => q.getBoundingClientRect().top)}))""")
        assert cells, path
        for c in cells:
            assert len(c["tops"]) == 3, (path.name, c)
            # each answer's first line is on the first screen, before any scrolling
            assert all(0 <= t and t + 16 <= VIEWPORT[1] for t in c["tops"]), (tree, path.name, c)
        assert not page.console_errors()


def test_every_fix_cost_names_its_energy_or_why_it_has_none():
    """One phrase for a fix's cost wherever the first screen gives one: tokens/s and J/token, each
    a ratio, and the missing one named as missing with its reason, never dropped in silence."""
    from suite.analysis.claims import Claim, Evidence
    from suite.stages.controls.screen import energy_gap as _energy_gap
    from suite.stages.screen import cost_text as _cost_text

    assert _cost_text({"tokens_per_s": 0.64, "j_per_token": 1.97}) == "0.64x the tokens/s, 1.97x the J/token"
    assert _cost_text({"tokens_per_s": 0.5}) == "0.50x the tokens/s, J/token not measured"
    assert _cost_text({"j_per_token": 2.0}) == "tokens/s not measured, 2.00x the J/token"
    assert _cost_text({}) == ""
    pair = Claim(stage="controls", kind="control", arm="a", verdict="restores one answer",
                 evidence=Evidence(unit="pairs of requests in one launch"))
    launch = pair.model_copy(update={"evidence": Evidence(unit="launches")})
    assert "alternate inside one launch" in _cost_text({"tokens_per_s": 0.9}, _energy_gap(pair))
    assert _cost_text({"tokens_per_s": 0.9}, _energy_gap(launch)).endswith("J/token not measured (no energy reading)")


def test_the_site_quotes_no_stage_name() -> None:
    """The first screen and every page learn of the stages through the registry alone: no module of
    suite/site names a built-in stage in quotes (the verdict stage is `VERDICT_STAGE`, the others'
    first-screen parts come through `Stage.first_screen`). The exceptions are listed with why."""
    from suite.stages import BUILT_IN

    site = Path(__file__).resolve().parents[2] / "suite" / "site"
    # a name that is not a stage's here: the template variable holding the page's gate prompts
    allowed = {("publish.py", '"gate": [{p.prompt_id: p for p in gate}]}')}
    names = "|".join(re.escape(s.name) for s in BUILT_IN)
    found = [(path.name, line.strip()) for path in sorted(site.glob("*.py"))
             for line in path.read_text().splitlines() if re.search(rf"""(["'])({names})\1""", line)]
    assert [f for f in found if f not in allowed] == []

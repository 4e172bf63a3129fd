"""The first screen answers three questions per arm: does it give the same answer twice (one
verdict line, one distinct-answers bar per gate prompt), how fast it is, and what changes it.
Built from a real record tree (a standard-profile bench of the tiny model's three CPU arms)."""

from __future__ import annotations

import html
import re
from pathlib import Path

from suite.site.publish import build_site

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples" / "cpu-results"


def _rows(page: str, cls: str) -> dict[str, str]:
    """Per arm, the text of its verdict (the row's `verdict-text`)."""
    return {m.group(1): re.sub(r"<[^>]+>", " ", re.search(r'<span class="verdict-text">(.*?)</span>', m.group(2), re.S).group(1))
            for m in re.finditer(rf'<tr class="{cls}" data-arm="([^"]+)">(.*?)</tr>', page, re.S)}


def test_each_arm_has_one_verdict_line_and_a_bar_per_prompt(tmp_path: Path) -> None:
    build_site(EXAMPLES, tmp_path / "site")
    page = (tmp_path / "site" / "index.html").read_text()
    verdicts = {arm: " ".join(html.unescape(t).split()) for arm, t in _rows(page, "verdict-row").items()}
    assert set(verdicts) == {"llamacpp", "llamacpp-python", "vllm-cpu"}
    # llama-server gave 2 answers in 20 on each prompt: its first request after the start differed
    assert verdicts["llamacpp"].startswith("varies: document-4k: 2 answers of 20, cold-start transient")
    assert verdicts["vllm-cpu"].startswith("the same answer every time: 1 answer per prompt (20 of 20 on each of 3")
    bars = re.findall(r'<div class="answers-bar" title="([^"]+)">(.*?)</div>', page, re.S)
    assert len(bars) == 9  # three arms, three gate prompts each
    widths = [(title, [float(w) for w in re.findall(r"width: ([0-9.]+)%", body)]) for title, body in bars]
    two = [w for t, w in widths if "2 distinct of 20" in t]
    assert len(two) == 3 and all(w == [95.0, 5.0] for w in two)  # 19 of 20 and 1 of 20, the most common first
    assert all(abs(sum(w) - 100.0) < 0.2 for _, w in widths)

"""Each stage's verdict on the console is one short line from its claims (the full reasoning is on
the page and in `--json`)."""

from __future__ import annotations

from pathlib import Path

from suite.claims import STAGE_LINE_LIMIT, stage_line
from suite.records import load_all
from suite.stages import STAGES

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def test_every_stage_of_every_example_run_says_its_verdict_in_one_short_line() -> None:
    said = 0
    for tree in ("cpu-results", "gpu-vllm-results", "gpu-lightning-results"):
        for s in load_all(EXAMPLES / tree):
            for name in STAGES:
                result = getattr(s, name, None)
                if result is None:
                    continue
                line = stage_line(s, name, result)
                assert "\n" not in line and len(line) <= STAGE_LINE_LIMIT, (s.run_id, name, line)
                said += bool(line)
    assert said > 20
    w4a16 = next(s for s in load_all(EXAMPLES / "gpu-lightning-results") if s.run_id.endswith("-442868b2"))
    assert stage_line(w4a16, "controls", w4a16.controls) == "document-4k, long-open: nothing tested restores one answer"
    assert stage_line(w4a16, "gate", None) == ""

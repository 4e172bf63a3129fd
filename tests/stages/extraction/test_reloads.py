"""The reload's comparison (study 1): stable sections only, against every repeat, no-fact answers never "same".

Constructed answers through the stage's own functions (the stage on a real runtime runs in sessions/test_studies.py).
"""

from __future__ import annotations

import json
from typing import Any

from suite.analysis.scoring import score_part
from suite.stages import extraction as ex
from suite.stages.extraction.reloads import ReloadOutcome, compare_after, reloads_line, stable_sections


def _answer(section: ex.DocumentPart, repeat: int, obj: dict[str, Any] | None) -> ex.Answer:
    return ex.Answer(section=section.uid, repeat=repeat, text=json.dumps(obj) if obj is not None else "oops",
                     extracted=obj, json_status="ok" if obj is not None else "invalid",
                     score=score_part(section.facts, obj))


def _facts(section: ex.DocumentPart, value: str) -> dict[str, Any]:
    return {f.key: value for f in section.facts}


def _nulls(section: ex.DocumentPart) -> dict[str, Any]:
    return {f.key: None for f in section.facts}


def test_only_stable_sections_are_compared_after_the_reload_and_against_every_repeat():
    s1, s2, s3, s4 = ex.select_parts(4)
    answers = {
        s1.uid: [_answer(s1, r, _facts(s1, "a")) for r in range(3)],  # stable
        s2.uid: [_answer(s2, 0, _facts(s2, "a")), _answer(s2, 1, _facts(s2, "b")), _answer(s2, 2, _facts(s2, "a"))],
        s3.uid: [_answer(s3, r, _nulls(s3)) for r in range(3)],  # all null: agreeing on nothing
        s4.uid: [_answer(s4, 0, None)] + [_answer(s4, r, _facts(s4, "a")) for r in (1, 2)],  # one invalid
    }
    comparable, stable = stable_sections([s1, s2, s3, s4], answers)
    assert [s.uid for s in comparable] == [s1.uid, s2.uid, s3.uid]
    assert [s.uid for s in stable] == [s1.uid]  # old code: s3's nulls counted as identical (2 of 3)
    o = ReloadOutcome(index=0, status="ok")
    compare_after(o, s1, answers[s1.uid], _answer(s1, 0, _facts(s1, "a")))
    assert (o.compared, o.same) == (1, 1)
    # s2 varied within the launch; before, its first repeat alone was the reference and "a" was "same"
    assert reloads_line(len(stable), len(comparable), [o]) == "1 of 3 within, 1 of 1 after reload 1"


def test_no_fact_and_invalid_answers_after_the_reload():
    (s1,) = ex.select_parts(1)
    before = [_answer(s1, r, _nulls(s1) | {s1.facts[0].key: "x"}) for r in range(2)]
    o = ReloadOutcome(index=0, status="ok")
    compare_after(o, s1, before, _answer(s1, 0, _nulls(s1)))
    compare_after(o, s1, before, _answer(s1, 0, None))
    compare_after(o, s1, before, _answer(s1, 0, _nulls(s1) | {s1.facts[0].key: "x"}))
    assert (o.compared, o.same, o.no_facts, o.invalid) == (2, 1, 1, 1)
    assert reloads_line(1, 1, [o]) == "1 of 1 within, 1 of 2 after reload 1 (1 with no fact; 1 without JSON, left out)"


def test_all_null_repeats_are_not_identical_in_the_extraction_either():
    s1, s2 = ex.select_parts(2)
    answers = {s1.uid: [_answer(s1, r, _nulls(s1)) for r in range(3)],
               s2.uid: [_answer(s2, r, _facts(s2, "a")) for r in range(3)]}
    out = ex.summarise([s1, s2], answers, 3)
    rows = {r.section: r for r in out["per_section"]}
    assert rows[s1.uid].no_facts and not rows[s1.uid].identical
    assert rows[s2.uid].identical and not rows[s2.uid].no_facts
    assert (out["identical_sections"], out["comparable_sections"]) == (1, 2)

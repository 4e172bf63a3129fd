"""Extraction's headline figures count only real answers; arms are compared as a paired difference.

Synthetic answers through the real functions (summarise, extraction_view, headline,
extraction_pairs) and, once, through the site generator on a copy of the golden results.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from suite.analysis.stats import paired_difference

from suite.site import figures
from suite.stages.extraction import view as extraction_page
from suite.analysis.scoring import score_part
from suite.stages.extraction.judge import JudgeResult
from suite.stages import extraction as ex

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "results"


def _answer(section: ex.DocumentPart, repeat: int, obj: dict[str, Any] | None, text: str = "oops") -> ex.Answer:
    return ex.Answer(section=section.uid, repeat=repeat, text=json.dumps(obj) if obj is not None else text,
                     extracted=obj, json_status="ok" if obj is not None else "invalid",
                     score=score_part(section.facts, obj))


def _right(section: ex.DocumentPart) -> dict[str, Any]:
    """An answer with every fact right."""
    return {f.key: f.value if f.type == "boolean" or (f.type == "number" and not f.unit) else f.canonical()
            for f in section.facts}


def _nulls(section: ex.DocumentPart) -> dict[str, Any]:
    return {f.key: None for f in section.facts}


def test_invalid_repeats_are_not_identical_and_are_counted_apart():
    s1, s2, s3, s4 = ex.select_parts(4)
    answers = {
        s1.uid: [_answer(s1, r, _right(s1)) for r in range(3)],  # identical, valid
        s2.uid: [_answer(s2, r, None) for r in range(3)],  # three invalid answers (same text)
        s3.uid: [_answer(s3, 0, None, "oops"), _answer(s3, 1, None, "garbage"), _answer(s3, 2, None, "oops")],
        s4.uid: [_answer(s4, 0, None), _answer(s4, 1, _nulls(s4)), _answer(s4, 2, _nulls(s4))],  # one invalid
    }
    out = ex.summarise([s1, s2, s3, s4], answers, 3)
    rows = {r.section: r for r in out["per_section"]}
    # old code: s2 and s3 (all "<invalid>") counted as identical: 3 of 4
    assert out["identical_sections"] == 1
    assert out["comparable_sections"] == 1 and out["invalid_sections"] == 3
    assert [rows[s.uid].identical for s in (s1, s2, s3, s4)] == [True, False, False, False]
    assert [rows[s.uid].comparable for s in (s1, s2, s3, s4)] == [True, False, False, False]
    # changed between repeats: s3 (two different invalid texts) and s4 (invalid vs valid); not s2
    assert ex.changed_parts([s1, s2, s3, s4], answers) == [s3.uid, s4.uid]
    assert out["changed_sections"] == 2
    # the view counts identical sections over the comparable ones and marks invalid repeats
    view = extraction_page.extraction_view(_dump(out, 4, 3))
    assert (view["identical"], view["comparable"], view["invalid_sections"]) == (1, 1, 3)
    assert view["grid"] == {s1.uid: "same", s2.uid: "error", s3.uid: "error", s4.uid: "error"}


def test_all_null_answers_are_clean_but_not_complete():
    s1, s2 = ex.select_parts(2)
    answers = {
        s1.uid: [_answer(s1, r, _nulls(s1)) for r in range(2)],  # empty: "clean" by the lenient figure
        s2.uid: [_answer(s2, 0, _right(s2)), _answer(s2, 1, _nulls(s2))],
    }
    out = ex.summarise([s1, s2], answers, 2)
    rows = {r.section: r for r in out["per_section"]}
    assert rows[s1.uid].clean_rate == 1.0 and rows[s1.uid].complete_rate == 0.0
    assert rows[s2.uid].clean_rate == 1.0 and rows[s2.uid].complete_rate == 0.5
    assert out["clean_share"].mean == 1.0  # the old headline: 100 % "clean" with nothing extracted
    assert out["complete_share"].n == 2 and out["complete_share"].mean == pytest.approx(0.25)
    assert [r.complete_share for r in out["per_repeat"]] == [0.5, 0.0]
    # all-null answers are valid (comparable) but agree on nothing: never "identical"
    assert out["identical_sections"] == 0 and out["comparable_sections"] == 2
    assert rows[s1.uid].no_facts and not rows[s1.uid].identical
    h = figures.headline(_summary({"extraction": _dump(out, 2, 2)}))
    assert (h.complete_share, h.complete_n) == (pytest.approx(0.25), 2) and h.clean_share == 1.0


def test_one_section_and_zero_sections():
    (s1,) = ex.select_parts(1)
    one = ex.summarise([s1], {s1.uid: [_answer(s1, 0, _right(s1))]}, 1)
    assert one["identical_sections"] == 1 and one["complete_share"].mean == 1.0 and one["complete_share"].se is None
    zero = ex.summarise([], {}, 2)
    assert zero["identical_sections"] == 0 and zero["comparable_sections"] == 0 and zero["invalid_sections"] == 0
    assert zero["complete_share"].n == 0 and zero["complete_share"].mean is None
    assert [r.complete_share for r in zero["per_repeat"]] == [None, None]


def test_old_records_still_read_and_keep_their_meaning():
    old = {"sections": 2, "repeats": 2, "identical_sections": 2, "clean_share": {"n": 2, "mean": 0.5, "se": 0.5},
           "per_section": [{"section": "a/1", "identical": True, "invalid_json": 1, "clean_rate": 1.0},
                           {"section": "a/2", "identical": True, "invalid_json": 2, "clean_rate": 0.0}]}
    view = extraction_page.extraction_view(_result(old))
    assert view["comparable"] is None and view["complete"] == (None, None, None)
    assert view["grid"] == {"a/1": "same", "a/2": "error"}
    h = figures.headline(_summary({"extraction": _result(old)}))
    assert h.complete_share is None and h.clean_share == 0.5 and h.clean_n == 2
    ex.SectionSummary.model_validate({"section": "a/1", "kind": "k", "facts": 1, "identical": True,
                                      "distinct_answers": 1, "clean_rate": 1.0, "recall": 1.0, "precision": 1.0,
                                      "invalid_json": 0})


def _rows(rates: dict[str, float], field: str = "complete_rate") -> list[dict[str, Any]]:
    return [{"section": k, field: v, "clean_rate": v, "recall": v} for k, v in rates.items()]


def test_paired_comparison_of_arms():
    base = {"per_section": _rows({"a": 1.0, "b": 0.0, "c": 1.0, "d": 0.5})}
    same = {"per_section": _rows({"a": 1.0, "b": 0.0, "c": 1.0, "d": 0.5})}
    better = {"per_section": _rows({"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0, "e": 0.0})}  # e: only this arm
    base, same, better = _result(base), _result(same), _result(better)
    pairs = extraction_page.extraction_pairs([base, None, same, better], ["x", "y", "z", "w"])
    assert [(p["arm"], p["against"]) for p in pairs] == [("z", "x"), ("w", "x")]
    tie = pairs[0]["rows"][0]
    assert tie["measure"] == "clean and complete" and tie["diff"].verdict == "no detectable difference"
    assert tie["diff"].n == 4 and "no detectable difference" in tie["text"] and "n = 4 paired document parts" in tie["text"]
    up = pairs[1]["rows"][0]["diff"]
    assert up.n == 4 and up.mean == pytest.approx(0.375)
    assert pairs[1]["rows"][0]["text"].startswith("+37.5 points")
    # one arm alone: nothing to compare
    assert extraction_page.extraction_pairs([base, None], ["x", "y"]) == []
    # one paired section: no interval, no verdict
    single = extraction_page.extraction_pairs([_result({"per_section": _rows({"a": 1.0})}),
                                       _result({"per_section": _rows({"a": 0.0})})], ["x", "y"])
    text = single[0]["rows"][0]["text"]
    assert "too few" in text and "no detectable" not in text and "n = 1 paired document part" in text
    # zero paired sections
    none = extraction_page.extraction_pairs([_result({"per_section": _rows({"a": 1.0})}),
                                     _result({"per_section": _rows({"b": 0.0})})], ["x", "y"])
    assert none[0]["rows"][0]["diff"].n == 0 and "no document part answered by both" in none[0]["rows"][0]["text"]


def test_paired_comparison_of_older_records_and_the_judge():
    # three paired sections: the fewest a direction is printed for
    old_a = {"per_section": [{"section": "a", "clean_rate": 1.0, "recall": 0.5},
                             {"section": "b", "clean_rate": 0.5, "recall": 0.5},
                             {"section": "c", "clean_rate": 1.0, "recall": 0.5}],
             "judge": {"per_section": {"a": 0.5, "b": 0.5, "c": 0.25}}}
    old_b = {"per_section": [{"section": "a", "clean_rate": 0.0, "recall": 0.5},
                             {"section": "b", "clean_rate": 0.0, "recall": 0.5},
                             {"section": "c", "clean_rate": 0.0, "recall": 0.5}],
             "judge": {"per_section": {"a": 1.0, "b": 1.0, "c": 1.0}}}
    rows = extraction_page.extraction_pairs([_result(old_a), _result(old_b)], ["x", "y"])[0]["rows"]
    assert [r["measure"].split(" ")[0] for r in rows] == ["clean", "recall", "judge"]
    # the page's three comparisons are one family (Bonferroni, 98.3 % intervals each): at three sections
    # the clean share's -1, -0.5, -1 no longer excludes 0, where alone (95 %) it did
    assert all(r["diff"].family == 3 and r["diff"].confidence == pytest.approx(1 - 0.05 / 3) for r in rows)
    assert rows[0]["diff"].mean == pytest.approx(-2.5 / 3) and rows[0]["diff"].verdict == "no detectable difference"
    alone = paired_difference({"a": 1.0, "b": 0.5, "c": 1.0}, {"a": 0.0, "b": 0.0, "c": 0.0})
    assert alone.verdict == "lower"
    assert rows[1]["diff"].verdict == "no detectable difference" and rows[1]["diff"].mean == 0.0
    assert rows[2]["diff"].verdict == "no detectable difference" and rows[2]["diff"].mean > 0
    assert paired_difference({"a": 0.5, "b": 0.5, "c": 0.25}, {"a": 1.0, "b": 1.0, "c": 1.0}).verdict == "higher"
    # two paired sections say no direction at all
    two = extraction_page.extraction_pairs([_result({"per_section": old_a["per_section"][:2]}),
                                    _result({"per_section": old_b["per_section"][:2]})], ["x", "y"])[0]["rows"]
    assert two[0]["diff"].verdict == "too few"


def test_site_shows_the_honest_figures(tmp_path):
    """The golden site, one arm's extraction replaced by a new record: identical count over the
    comparable sections, clean and complete on the index, paired differences on the model page."""
    from suite.site.publish import build_site

    results = tmp_path / "results"
    shutil.copytree(GOLDEN / "tiny", results / "tiny")
    summaries = sorted((results / "tiny").glob("*/*/summary.json"))
    target = next(p for p in summaries if p.parts[-3] == "llamacpp-python")
    data = json.loads(target.read_text())
    s1, s2, s3 = ex.select_parts(3)
    answers = {s1.uid: [_answer(s1, r, _right(s1)) for r in range(2)],
               s2.uid: [_answer(s2, r, None) for r in range(2)],
               s3.uid: [_answer(s3, r, _nulls(s3)) for r in range(2)]}
    out = ex.summarise([s1, s2, s3], answers, 2)
    data["extraction"] = dict(data["extraction"], **_dump(out, 3, 2).model_dump(mode="json", exclude_unset=True))
    target.write_text(json.dumps(data))
    site = tmp_path / "site"
    build_site(results, site)
    index = site.joinpath("index.html").read_text()
    assert "extraction clean and complete" in index
    assert f"{100 / 3:.1f} %" in index and "clean only" in index  # the new arm, and the older ones marked
    page = site.joinpath("models", "tiny.html").read_text()
    # s3's all-null repeats agree on nothing: comparable, not identical
    assert "<b>1</b> of 2 <span class=\"muted\">with valid JSON in every repeat" in page
    assert "1 of 3 <span class=\"muted\">(left out of the identical count)" in page
    assert "Arms compared part by part" in page and "paired document part" in page


_RESULT_DEFAULTS: dict[str, Any] = dict(
    prompt_version=1, documents={}, sections=0, repeats=1, max_tokens=64, mode="prompt-only", requests=0,
    failed_requests=0, invalid_json=0, identical_sections=0, facts_per_repeat=0, precision={"n": 0},
    recall={"n": 0}, recall_exact={"n": 0}, clean_share={"n": 0}, per_repeat=[], by_type={}, per_section=[],
    wall_s=0.0, signature_digest="x")
_SECTION_DEFAULTS: dict[str, Any] = dict(kind="k", facts=1, identical=True, distinct_answers=1, clean_rate=0.0,
                                         recall=0.0, precision=None, invalid_json=0)


def _result(fields: dict[str, Any]) -> ex.ExtractionResult:
    """An extraction result as a record holds it, from some of its fields (the rest at defaults),
    validated by the stage's own model."""
    fields = dict(fields)
    sections = [_SECTION_DEFAULTS | (sec.model_dump() if hasattr(sec, "model_dump") else sec)
                for sec in fields.pop("per_section", [])]
    judge = fields.pop("judge", None)
    result = ex.ExtractionResult.model_validate(_RESULT_DEFAULTS | fields | {"per_section": sections})
    if judge is not None:  # only its per-section scores matter to the comparisons
        result.judge = JudgeResult.model_construct(**judge)
    return result


def _dump(out: dict[str, Any], sections: int, repeats: int) -> ex.ExtractionResult:
    """The extraction result a record would hold for `out` (as the site reads it)."""
    return _result(out | {"sections": sections, "repeats": repeats})


def _summary(stages: dict[str, Any]) -> Any:
    """A stand-in for a Summary: headline() reads only its stage results."""

    class S:
        gate = None
        latency = None
        extraction = stages.get("extraction")

    return S()

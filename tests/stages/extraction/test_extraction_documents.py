"""The extraction documents and the stage's pure parts: loading, section sets, prompts, summaries."""

import json
from pathlib import Path

import pytest

from suite.errors import SuiteError
from suite.analysis.scoring import score_part
from suite.stages.extraction.documents import response_format_for
from suite.stages import extraction as ex


def test_documents_load_with_the_promised_sets():
    docs = ex.load_documents()
    kinds = {d.kind for d in docs}
    assert len(kinds) >= 6, kinds
    sections = [s for d in docs for s in d.sections]
    assert len(sections) >= 48
    counts = {tag: sum(tag in s.profiles for s in sections) for tag in ex.SECTION_SETS}
    assert counts == {"quick": 3, "standard": 24, "full": 48}
    # quick is part of standard, standard part of full
    for s in sections:
        if "quick" in s.profiles:
            assert "standard" in s.profiles
    types = {f.type for s in sections for f in s.facts}
    assert types == {"string", "number", "date", "time", "boolean", "name"}
    # negations are there: false booleans, and names with titles
    assert sum(f.value is False for s in sections for f in s.facts if f.type == "boolean") >= 20
    # sections stay short for a 2-core machine
    assert all(40 <= len(s.text.split()) <= 150 for s in sections)


def test_select_sections():
    assert [s.uid for s in ex.select_parts(3)] == [s.uid for s in ex.select_parts(48) if "quick" in s.profiles]
    assert len(ex.select_parts(24)) == 24
    assert all("standard" in s.profiles for s in ex.select_parts(10))
    assert len(ex.select_parts(30)) == 30
    with pytest.raises(SuiteError, match="only 48 sections"):
        ex.select_parts(49)


def test_prompt_and_schema():
    section = ex.select_parts(1)[0]
    text = ex.build_prompt(section, ex.load_prompt())
    assert section.text.strip() in text
    for f in section.facts:
        assert f"- {f.key}: {f.ask}" in text
    schema = ex.json_schema_for(section.facts)
    assert schema["required"] == [f.key for f in section.facts]
    kinds = {k: v["anyOf"][0]["type"] for k, v in schema["properties"].items()}
    for f in section.facts:
        expected = "boolean" if f.type == "boolean" else "number" if (f.type == "number" and not f.unit) else "string"
        assert kinds[f.key] == expected
    assert response_format_for("prompt-only", schema) is None
    assert response_format_for("json_schema", schema)["json_schema"]["schema"] is schema


def test_bad_document_names_file_and_key(tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text('version = 1\nid = "x"\nkind = "k"\ntitle = "t"\n[[sections]]\nid = "s1"\n'
                   'profiles = ["full"]\ntext = "words"\nfacts = [{ key = "a", type = "number", ask = "a", value = 1, colour = "red" }]\n')
    with pytest.raises(SuiteError) as err:
        ex.load_document(bad)
    assert str(bad) in str(err.value) and "colour" in str(err.value)
    bad.write_text('version = 1\nid = "x"\nkind = "k"\ntitle = "t"\n[[sections]]\nid = "s1"\n'
                   'profiles = ["quick"]\ntext = "words"\nfacts = [{ key = "a", type = "number", ask = "a", value = 1 }]\n')
    with pytest.raises(SuiteError, match="'full' set"):
        ex.load_document(bad)
    bad.write_text("version = [")
    with pytest.raises(SuiteError, match="not valid TOML"):
        ex.load_document(bad)


def _answer(section, repeat, obj):
    return ex.Answer(section=section.uid, repeat=repeat, text=json.dumps(obj) if obj is not None else "oops",
                     extracted=obj, json_status="ok" if obj is not None else "invalid",
                     score=score_part(section.facts, obj))


def test_summarise_constructed_answers():
    s1, s2 = ex.select_parts(2)
    right1 = {f.key: f.canonical() if f.type != "boolean" else f.value for f in s1.facts}
    # number facts without a unit must be numbers for an exact answer
    right1 = {f.key: (f.value if f.type in ("boolean",) or (f.type == "number" and not f.unit) else right1[f.key])
              for f in s1.facts}
    wrong1 = dict(right1)
    first_key = s1.facts[0].key
    wrong1[first_key] = "something else"
    answers = {
        s1.uid: [_answer(s1, 0, right1), _answer(s1, 1, wrong1), _answer(s1, 2, right1)],
        s2.uid: [_answer(s2, 0, None), _answer(s2, 1, None), _answer(s2, 2, None)],
    }
    out = ex.summarise([s1, s2], answers, 3)
    # s1 differs between repeats; s2's three invalid answers are not "identical facts": left out, reported apart
    assert out["identical_sections"] == 0 and out["invalid_sections"] == 1
    assert out["invalid_json"] == 3
    assert out["facts_per_repeat"] == len(s1.facts) + len(s2.facts)
    rows = {r.section: r for r in out["per_section"]}
    assert rows[s1.uid].distinct_answers == 2 and rows[s1.uid].clean_rate == pytest.approx(2 / 3)
    assert rows[s2.uid].clean_rate == 0 and rows[s2.uid].precision is None
    n1 = len(s1.facts)
    assert rows[s1.uid].recall == pytest.approx((1 + (n1 - 1) / n1 + 1) / 3)
    assert out["clean_share"].n == 2 and out["clean_share"].mean == pytest.approx(1 / 3)
    assert out["clean_share"].se == pytest.approx(1 / 3)  # sd of [2/3, 0] / sqrt(2)
    assert [r.clean_share for r in out["per_repeat"]] == [0.5, 0.0, 0.5]
    assert out["precision"].n == 1  # only s1 answered anything
    assert out["recall_exact"].mean == pytest.approx(rows[s1.uid].recall / 2)
    assert sum(t.facts for t in out["by_type"].values()) == 3 * (len(s1.facts) + len(s2.facts))

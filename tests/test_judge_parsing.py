"""The judge's pure parts: rubric, prompt, verdict parsing, credentials kept out of records."""

import pytest

from suite.errors import SuiteError
from suite.scoring import score_section
from suite.stages import extraction as ex
from suite.stages import judge


def test_rubric_and_prompt():
    rubric = judge.load_rubric()
    section = ex.select_sections(1)[0]
    obj = {f.key: None for f in section.facts}
    answer = ex.Answer(section=section.uid, repeat=0, text="{}", extracted=obj, json_status="ok",
                       score=score_section(section.facts, obj))
    text = judge.build_judge_prompt(rubric, section, answer)
    assert section.text.strip() in text and '"reasoning"' in text
    for f in section.facts:
        assert f"- {f.key}: {f.ask}" in text
        assert f.canonical() not in text or f.canonical() in section.text  # gold is never shown
    schema = judge.judge_schema(section)
    assert schema["properties"]["verdicts"]["required"] == [f.key for f in section.facts]


def test_bad_rubric_names_the_file(tmp_path):
    p = tmp_path / "rubric.toml"
    p.write_text('version = 1\nmax_tokens = 10\ntemplate = "{text} {gold}"\n')
    with pytest.raises(SuiteError, match="placeholders"):
        judge.load_rubric(p)
    p.write_text('version = 1\ntemplate = "x"\n')
    with pytest.raises(SuiteError, match="max_tokens"):
        judge.load_rubric(p)


def test_parse_verdicts():
    section = ex.select_sections(1)[0]
    keys = [f.key for f in section.facts]
    obj = {"reasoning": "fine", "verdicts": {keys[0]: "Correct", keys[1].upper(): "wrong", keys[2]: "perhaps"}}
    verdicts, reasoning = judge.parse_verdicts(section, obj)
    assert reasoning == "fine"
    assert verdicts[keys[0]] == "correct" and verdicts[keys[1]] == "wrong"
    assert verdicts[keys[2]] == "wrong"  # not a verdict word: counted wrong
    assert all(verdicts[k] == "missing" for k in keys[3:])
    assert judge.parse_verdicts(section, None) == (None, None)
    assert judge.parse_verdicts(section, {"verdicts": "all good"})[0] is None


def test_public_url_drops_credentials():
    assert judge.public_url("https://user:s3cret@judge.example:8443/v1") == "https://judge.example:8443/v1"
    assert judge.public_url("http://127.0.0.1:9000") == "http://127.0.0.1:9000"
    with pytest.raises(SuiteError, match="http"):
        judge.client_for_url("ftp://x", "m")

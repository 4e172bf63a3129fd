"""Finding the JSON object in messy model output: never an exception, invalid counted as such."""

import pytest

from suite.analysis.jsonextract import extract_json_object


@pytest.mark.parametrize(
    ("text", "method"),
    [
        ('{"a": 1, "b": "x"}', "whole"),
        ('  \n{"a": 1, "b": "x"}\n', "whole"),
        ('```json\n{"a": 1, "b": "x"}\n```', "fenced"),
        ('Here are the facts:\n```json\n{"a": 1, "b": "x"}\n```\nHope this helps!', "fenced"),
        ('```\n{"a": 1, "b": "x"}\n```', "fenced"),
        ('Sure! {"a": 1, "b": "x"} Anything else?', "embedded"),
        ('{"a": 1, "b": "x"}\n\nNote: b is a guess.', "embedded"),
        ('The text says {not json} but then {"a": 1, "b": "x"}', "embedded"),
    ],
)
def test_finds_the_object(text, method):
    got = extract_json_object(text)
    assert got.status == "ok"
    assert got.value == {"a": 1, "b": "x"}
    assert got.method == method


@pytest.mark.parametrize(
    ("text", "status", "reason"),
    [
        ("", "empty", "empty"),
        (None, "empty", "empty"),
        ("   ", "empty", "empty"),
        ("I cannot find these facts.", "invalid", "no JSON object"),
        ('{"a": 1, "b": "cut sh', "invalid", "unterminated"),
        ('```json\n{"a": 1,, }\n```', "invalid", "fenced block"),
        ("[1, 2, 3]", "invalid", "not an object"),
        ("{'a': 1}", "invalid", ""),
        ('"just a string"', "invalid", "not an object"),
    ],
)
def test_invalid_is_a_typed_result(text, status, reason):
    got = extract_json_object(text)
    assert got.status == status
    assert got.value is None
    assert reason in (got.error or "")


def test_nested_object_and_unicode():
    got = extract_json_object('```json\n{"name": "Ing. Radka Šimková", "x": {"y": [1, null]}}\n```')
    assert got.ok and got.value == {"name": "Ing. Radka Šimková", "x": {"y": [1, None]}}

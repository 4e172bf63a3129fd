"""Bad input never gives a traceback.

Property-based: every TOML loader (model cards, runtime definitions, gate prompts, extraction
documents and prompt, judge rubric) and the results reader, fed random bytes or a real file with
random mutations (keys deleted, values replaced by values of any type, unknown keys added), gives
either a valid object or a `SuiteError` whose message names the file. The CLI turns such an error
into one line and exit status 2.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suite.catalog import load_card
from suite.definitions import load_definition
from suite.errors import SuiteError
from suite.records import load_all, load_summary
from suite.stages.extraction import load_document, load_prompt
from suite.stages.gate_models import load_gate_prompt
from suite.stages.extraction.judge import load_rubric

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "results"
FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])

# name -> (template file, loader, where the file goes in a fresh folder)
TOML_LOADERS: dict[str, tuple[Path, Callable[[Path], Any], str]] = {
    "card": (REPO / "suite/cards/tiny.toml", load_card, "tiny.toml"),
    "definition": (REPO / "images/llamacpp/runtime.toml", load_definition, "llamacpp/runtime.toml"),
    "gate-prompt": (REPO / "prompts/gate/short-open.toml", load_gate_prompt, "short-open.toml"),
    "document": (REPO / "prompts/extraction/documents/corvane-hp9.toml", load_document, "corvane-hp9.toml"),
    "extraction-prompt": (REPO / "prompts/extraction/prompt.toml", load_prompt, "prompt.toml"),
    "rubric": (REPO / "prompts/judge/rubric.toml", load_rubric, "rubric.toml"),
}


# ---------------------------------------------------------------- writing TOML and JSON


def toml_str(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out) + '"'


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return toml_str(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml_str(str(k))} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def toml_dumps(doc: dict[str, Any]) -> str:
    return "".join(f"{toml_str(str(k))} = {toml_value(v)}\n" for k, v in doc.items())


# ---------------------------------------------------------------- strategies

TRICKY_STRINGS = ["", " ", "{", "}", "{model_path}", "{nope}", "{text.x}", "{0}", "{text!z}", "{text:%}",
                  "pypi:", "hf:", "derive:", "derive:nope", "derive:gguf", "full", "quick", "gguf", "../x",
                  "é\u0301", "\u202e", "a" * 300, "(", "[", "*", "\\d+"]
KEYS = st.one_of(st.sampled_from(["name", "id", "version", "kind", "formats", "arms", "local", "command",
                                  "sections", "facts", "template", "max_tokens", "prompt", "controls",
                                  "server", "docker", "base", "determinism_control", "profiles", "key",
                                  "type", "value", "source", "file", "runtime", "format", "nonsense"]),
                 st.text(min_size=1, max_size=8))
SCALARS = st.one_of(st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(),
                    st.text(st.characters(exclude_categories=("Cs",)), max_size=20), st.sampled_from(TRICKY_STRINGS))
TOML_VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
                           max_leaves=8)
JSON_VALUES = st.recursive(st.none() | SCALARS,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
                           max_leaves=8)


def paths_of(tree: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value in a tree of dicts and lists (the root is ())."""
    found = [prefix]
    if isinstance(tree, dict):
        for k, v in tree.items():
            found += paths_of(v, prefix + (k,))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            found += paths_of(v, prefix + (i,))
    return found


def mutate(draw: Callable, tree: Any, values: st.SearchStrategy) -> Any:
    """Apply 1-4 random edits: delete a key or item, replace a value, add a key."""
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(paths_of(tree)))
        op = draw(st.sampled_from(["delete", "replace", "add"]))
        if not path:
            if op == "add" and isinstance(tree, dict):
                tree[draw(KEYS)] = draw(values)
            elif op == "replace":
                tree = draw(values)
            continue
        parent = tree
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        if op == "delete":
            del parent[last]
        elif op == "replace":
            parent[last] = draw(values)
        elif isinstance(parent[last], dict):
            parent[last][draw(KEYS)] = draw(values)
        elif isinstance(parent[last], list):
            parent[last].append(draw(values))
        else:
            parent[last] = draw(values)
    return tree


@st.composite
def mutated_toml(draw: Callable, template: Path) -> bytes:
    doc = tomllib.loads(template.read_text())
    doc = mutate(draw, doc, TOML_VALUES)
    if not isinstance(doc, dict):  # a TOML document is a table
        doc = {"value": doc}
    return toml_dumps(doc).encode()


RAW = st.one_of(st.binary(max_size=200),
                st.text(max_size=200).map(lambda s: s.encode("utf-8", "surrogatepass")),
                st.lists(st.tuples(KEYS, SCALARS), max_size=6).map(
                    lambda kv: "".join(f"{k} = {toml_value(v)}\n" for k, v in kv).encode("utf-8", "surrogatepass")))


# ---------------------------------------------------------------- the property


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    root = tmp_path_factory.mktemp("fuzz")

    def fresh(rel: str) -> Path:
        path = root / uuid.uuid4().hex / rel
        path.parent.mkdir(parents=True)
        return path

    return fresh


def load_or_suite_error(load: Callable[[Path], Any], path: Path, data: bytes) -> Any:
    path.write_bytes(data)
    try:
        return load(path)
    except SuiteError as exc:
        assert str(path) in str(exc), f"the message does not name the file: {exc}"
        return exc


def test_templates_round_trip_through_the_writer(scratch):
    """The mutations start from files that load: the writer above reproduces them faithfully."""
    for name, (template, load, rel) in TOML_LOADERS.items():
        doc = tomllib.loads(template.read_text())
        assert tomllib.loads(toml_dumps(doc)) == doc, name
        result = load_or_suite_error(load, scratch(rel), toml_dumps(doc).encode())
        assert not isinstance(result, SuiteError), f"{name}: {result}"


@pytest.mark.parametrize("name", list(TOML_LOADERS))
@FUZZ
@given(data=st.data())
def test_toml_loader_mutated_file(scratch, name: str, data: st.DataObject):
    template, load, rel = TOML_LOADERS[name]
    load_or_suite_error(load, scratch(rel), data.draw(mutated_toml(template)))


@pytest.mark.parametrize("name", list(TOML_LOADERS))
@FUZZ
@given(raw=RAW)
def test_toml_loader_random_bytes(scratch, name: str, raw: bytes):
    _, load, rel = TOML_LOADERS[name]
    load_or_suite_error(load, scratch(rel), raw)


def test_validation_errors_name_the_file_and_the_key(scratch):
    template, _, rel = TOML_LOADERS["definition"]
    doc = tomllib.loads(template.read_text())
    doc["server"]["nonsense"] = 1
    err = load_or_suite_error(load_definition, scratch(rel), toml_dumps(doc).encode())
    assert isinstance(err, SuiteError) and "server.nonsense" in str(err)
    doc = tomllib.loads(template.read_text())
    doc["server"]["startup_timeout_s"] = "soon"
    err = load_or_suite_error(load_definition, scratch(rel), toml_dumps(doc).encode())
    assert isinstance(err, SuiteError) and "server.startup_timeout_s" in str(err)
    template, _, rel = TOML_LOADERS["rubric"]
    doc = tomllib.loads(template.read_text())
    doc["template"] = "{text.x}"
    err = load_or_suite_error(load_rubric, scratch(rel), toml_dumps(doc).encode())
    assert isinstance(err, SuiteError) and "template" in str(err)


# ---------------------------------------------------------------- the results reader

GOLDEN_RUN = next(p.parent for p in sorted(GOLDEN.glob("tiny/*/*/summary.json")))


@st.composite
def mutated_json(draw: Callable, template: Path) -> bytes:
    doc = mutate(draw, json.loads(template.read_text()), JSON_VALUES)
    return json.dumps(doc, allow_nan=True).encode()


JSON_RAW = st.one_of(RAW, JSON_VALUES.map(lambda v: json.dumps(v).encode()))


@FUZZ
@given(data=st.one_of(mutated_json(GOLDEN_RUN / "summary.json"), JSON_RAW))
def test_load_summary(scratch, data: bytes):
    load_or_suite_error(load_summary, scratch("summary.json"), data)


@FUZZ
@given(run_json=st.one_of(mutated_json(GOLDEN_RUN / "run.json"), JSON_RAW),
       stage=st.one_of(mutated_json(GOLDEN_RUN / "stages" / "gate.json"), JSON_RAW))
def test_load_all_with_a_broken_incomplete_run(scratch, run_json: bytes, stage: bytes):
    """An interrupted run (no summary.json) is read from run.json and its stage files."""
    results = scratch("results/x").parent
    run = results / "tiny" / "llamacpp" / "20260101T000000000000Z-00000000"
    (run / "stages").mkdir(parents=True)
    (run / "run.json").write_bytes(run_json)
    (run / "stages" / "gate.json").write_bytes(stage)
    try:
        load_all(results)
    except SuiteError as exc:
        assert str(run) in str(exc), f"the message does not name the file: {exc}"


# ---------------------------------------------------------------- through the CLI


def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "suite.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "60", **env})


def test_cli_reports_a_broken_card_in_one_line_with_status_2(tmp_path: Path):
    cards = tmp_path / "cards"
    cards.mkdir()
    # Beside the built-in cards (SUITE_CARDS adds a folder to them), every one of which loads.
    # An unknown key whose name holds a line break, in a file with a long path: still one line.
    broken = cards / ("broken-" + "x" * 80 + ".toml")
    broken.write_text('name = "broken"\ntitle = "t"\nserved_name = "b"\nformats = {}\narms = {}\n"a\\nb" = 1\n')
    out = run_cli(["models"], {"SUITE_CARDS": str(cards)})
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert str(broken) in lines[0] and lines[0].startswith("error:")
    # Invalid UTF-8 in a card: the same.
    broken.write_bytes(b'name = "\xff\xfe"\n')
    out = run_cli(["models"], {"SUITE_CARDS": str(cards)})
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and str(broken) in out.stderr

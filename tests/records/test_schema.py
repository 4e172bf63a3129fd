"""The run record's published JSON Schema (docs/schema/v<N>/) is what the models generate, and
the example trees' records (upgraded to this version) and a new record validate against it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.records import SCHEMA_VERSION, has_record, read_record, upgraded
from suite.schema import FILES, PUBLISHED, record_schemas, schema_text

REPO = Path(__file__).resolve().parents[2]


def test_the_published_schema_is_what_the_models_generate() -> None:
    folder = PUBLISHED / f"v{SCHEMA_VERSION}"
    generated = record_schemas()
    assert sorted(generated) == sorted(name for name, _ in FILES.values())
    for name, schema in generated.items():
        path = folder / name
        assert path.exists(), f"{path} is missing: run `python -m suite.schema`"
        assert path.read_text(encoding="utf-8") == schema_text(schema), (
            f"{path} differs from what the models generate: run `python -m suite.schema` and commit it")
        assert schema["x-schema-version"] == SCHEMA_VERSION and schema["$schema"].endswith("2020-12/schema")
    summary = generated["summary.schema.json"]["properties"]
    assert {"suite", "invocation", "gate", "latency", "energy"} <= set(summary)
    assert "tags" in generated["summary.schema.json"]["$defs"]["Invocation"]["properties"]


def test_example_records_validate_against_the_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validators = {name: jsonschema.Draft202012Validator(schema) for name, schema in record_schemas().items()}
    checked = checked_lines = 0
    for tree in ("cpu-results", "gpu-results", "gpu-vllm-results"):
        for run_json in sorted((REPO / "docs" / "examples" / tree).glob("*/*/*/run.json")):
            for record_file in ("run.json", "summary.json"):
                path = run_json.parent / record_file
                if not has_record(path):  # plain or compacted (the example trees keep it compacted)
                    continue
                with read_record(path) as fh:
                    data = upgraded(path, json.loads(fh.read()))
                validators[FILES[record_file][0]].validate(data)
                checked += 1
            lines = run_json.parent / "requests.jsonl"
            if has_record(lines):
                with read_record(lines) as fh:
                    for raw in fh.read().decode("utf-8").splitlines()[:20]:
                        validators["request-line.schema.json"].validate(json.loads(raw))
                        checked_lines += 1
    assert checked >= 20 and checked_lines >= 200

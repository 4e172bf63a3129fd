"""The run record's JSON Schema, generated from its pydantic models, for tools other than the suite.

`record_schemas()` gives one JSON Schema (draft 2020-12) per file of a run folder, at the records'
schema version (`suite.records.SCHEMA_VERSION`): `run.json` (the manifest), `summary.json` (how
the run ended and every stage's result) and one line of `requests.jsonl` (picked by its `kind`).
They are published under docs/schema/v<N>/ (`python -m suite.schema` writes them there), and a
test checks that the published files equal what the models generate. A record of an older schema
version is upgraded by the suite when it loads it (`suite.records.UPGRADES`); another tool reads
the version a record names (`schema_version`) and the schema of that version.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from suite.records import REQUEST_LINE, SCHEMA_VERSION, RunManifest, Summary

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "docs" / "schema"
DRAFT = "https://json-schema.org/draft/2020-12/schema"

# file name in the run folder -> (schema file, what it holds)
FILES: dict[str, tuple[str, str]] = {
    "run.json": ("run.schema.json", "the manifest, written when the run starts"),
    "summary.json": ("summary.schema.json", "written once when the run ends: how it ended and every stage's result"),
    "requests.jsonl": ("request-line.schema.json", "one line per request, its model picked by `kind`"),
}


def record_schemas() -> dict[str, dict[str, Any]]:
    """Schema file name -> its JSON Schema, for this suite's record schema version."""
    generated = {
        "run.json": RunManifest.model_json_schema(mode="serialization"),
        "summary.json": Summary.model_json_schema(mode="serialization"),
        "requests.jsonl": REQUEST_LINE.json_schema(mode="serialization"),
    }
    out: dict[str, dict[str, Any]] = {}
    for record_file, schema in generated.items():
        name, what = FILES[record_file]
        out[name] = {
            "$schema": DRAFT,
            "$id": f"suite/run-record/v{SCHEMA_VERSION}/{name}",
            "title": f"suite run record, schema version {SCHEMA_VERSION}: {record_file}",
            "x-record-file": record_file,
            "x-schema-version": SCHEMA_VERSION,
            **schema,
            "description": f"{record_file}: {what}. " + str(schema.get("description", "")).strip(),
        }
    return out


def schema_text(schema: dict[str, Any]) -> str:
    """A schema as it is published: sorted keys, two-space indents, one final newline."""
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_schemas(folder: Path = PUBLISHED) -> list[Path]:
    """Write this version's schema files under `folder/v<N>/`; return their paths."""
    target = folder / f"v{SCHEMA_VERSION}"
    target.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, schema in record_schemas().items():
        path = target / name
        path.write_text(schema_text(schema), encoding="utf-8")
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in write_schemas(Path(sys.argv[1]) if len(sys.argv) > 1 else PUBLISHED):
        print(written)

"""`suite export`: the golden results tree as Parquet and CSV tables, read back with polars; the
example trees' exports concatenate table by table in polars and DuckDB with no cast."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from suite.errors import SuiteError
from suite.export import COLUMNS, export_tables, schema
from suite.records import load_all

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "results"
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p for p in (REPO / "docs" / "examples").iterdir() if any(p.glob("*/*/*/run.json")))


def read(path: Path) -> pl.DataFrame:
    return pl.read_parquet(path) if path.suffix == ".parquet" else pl.read_csv(path, infer_schema_length=None)


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_export_tables(tmp_path: Path, fmt: str) -> None:
    paths = export_tables(GOLDEN, fmt, tmp_path)
    names = {p.stem for p in paths}
    assert names == {"runs", "claims", "gate", "controls", "restarts", "sessions", "latency", "extraction_sections",
                     "watchdog", "requests"}
    assert all(p.suffix == f".{fmt}" for p in paths)
    tables = {p.stem: read(p) for p in paths}
    summaries = load_all(GOLDEN)

    runs = tables["runs"]
    assert runs.height == len(summaries) == 6
    assert runs["run_id"].to_list() == [s.run_id for s in summaries]  # oldest first
    vllm = next(s for s in summaries if s.arm == "vllm-cpu")
    row = runs.filter(pl.col("run_id") == vllm.run_id).row(0, named=True)
    assert row["determinism_outcome"] == "refused"
    assert row["signature_digest"] == vllm.signature.digest
    assert row["ttft_p50_ms"] == pytest.approx(vllm.latency.levels[0].ttft_s.p50 * 1000)
    assert row["extraction_clean_share"] == pytest.approx(vllm.extraction.clean_share.mean)

    gate = tables["gate"]
    assert gate.height == sum(len(s.gate.prompts) for s in summaries if s.gate)
    lp = gate.filter((pl.col("arm") == "llamacpp-python") & (pl.col("model") == "tiny")
                     & (pl.col("prompt_id") == "short-open")).row(0, named=True)
    assert lp["distinct_answers"] == 2 and lp["cold_is_modal"] is False
    if fmt == "parquet":  # lists as lists: the answers' lengths and their counts
        assert isinstance(lp["answer_lengths_tokens"], list) and sum(lp["answer_length_counts"]) == lp["answered"]
        assert runs.schema["started_at"] == pl.Datetime("us", "UTC")

    lines = sum(1 for p in GOLDEN.rglob("requests.jsonl") for ln in p.read_text().splitlines() if ln.strip())
    assert tables["requests"].height == lines
    assert "<script>" in "".join(tables["requests"]["text"].drop_nulls().to_list())  # data, kept as is
    # times in milliseconds, the unit in the name, as the runs table's ttft_p50_ms
    assert set(tables["latency"]["metric"].to_list()) >= {"ttft_ms", "itl_ms", "output_tokens_per_s"}
    ttft = tables["latency"].filter((pl.col("metric") == "ttft_ms") & (pl.col("run_id") == vllm.run_id)).row(0, named=True)
    assert ttft["unit"] == "ms" and ttft["p50"] == pytest.approx(vllm.latency.levels[0].ttft_s.p50 * 1000)
    assert {"ttft_ms", "e2e_ms", "tpot_ms"} <= set(tables["requests"].columns) and "ttft_s" not in tables["requests"].columns
    restarts = tables["restarts"]
    assert restarts["agreement_ci95_low"].drop_nulls().len() > 0
    # truncation beside every comparison of answers, and study 2's measures with their intervals
    assert {"truncated", "max_tokens"} <= set(gate.columns) and {"truncated", "answered"} <= set(restarts.columns)
    assert "truncated" in tables["controls"].columns
    sessions = tables["sessions"]
    adapter = sessions.filter(pl.col("configuration") == "adapter")
    assert sorted(adapter["measure"].to_list()) == ["identical runs", "items", "tokens"]
    items = adapter.filter(pl.col("measure") == "items").row(0, named=True)
    assert items["distinct_runs"] == 24 and 0 < items["across"] < 1
    assert items["across_ci95_low"] < items["across"] < items["across_ci95_high"]
    assert {"gate_answered", "gate_requests", "extraction_comparable_sections"} <= set(runs.columns)
    wd = tables["watchdog"]
    assert wd.filter(pl.col("tripped")).height == 1


def test_unknown_format_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="unknown export format 'xml'"):
        export_tables(GOLDEN, "xml", tmp_path)
    cli = Path(sys.executable).parent / "suite"
    proc = subprocess.run([str(cli), "export", "--format", "xml", "--out", str(tmp_path)], cwd=REPO,
                          env=dict(os.environ, RESULTS=str(GOLDEN)), capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    out = (proc.stdout + proc.stderr).strip()
    assert "Traceback" not in out and len(out.splitlines()) == 1 and "xml" in out


def test_every_table_has_its_declared_types_also_when_empty(tmp_path: Path) -> None:
    """Each written table's columns and types are the declared ones, whatever the rows hold."""
    for tree in EXAMPLES:
        for path in export_tables(tree, "parquet", tmp_path / tree.name):
            df = pl.read_parquet(path)
            assert df.schema == pl.Schema(schema(COLUMNS[path.stem])), (tree.name, path.stem)
            assert not [name for name, dtype in df.schema.items() if dtype == pl.Null], (tree.name, path.stem)


def test_example_trees_concatenate_in_polars_and_duckdb(tmp_path: Path) -> None:
    """The CPU and GPU example trees' exports concatenate table by table with no cast: in polars
    (a strict vertical concat) and in DuckDB (UNION ALL of the Parquet files, with every column's
    type the same in each file)."""
    duckdb = pytest.importorskip("duckdb")
    assert {"cpu-results", "gpu-vllm-results"} <= {t.name for t in EXAMPLES}
    written: dict[str, list[Path]] = {}
    for tree in EXAMPLES:
        for path in export_tables(tree, "parquet", tmp_path / tree.name):
            written.setdefault(path.stem, []).append(path)
    shared = {name: paths for name, paths in written.items() if len(paths) > 1}
    assert {"runs", "gate", "controls", "restarts", "watchdog", "requests"} <= set(shared)
    con = duckdb.connect()
    for name, paths in shared.items():
        frames = [pl.read_parquet(p) for p in paths]
        joined = pl.concat(frames, how="vertical")  # raises on any column whose type differs
        assert joined.height == sum(f.height for f in frames)
        kinds = [con.execute(f"DESCRIBE SELECT * FROM read_parquet('{p}')").fetchall() for p in paths]
        assert all(k == kinds[0] for k in kinds), name
        union = " UNION ALL ".join(f"SELECT * FROM read_parquet('{p}')" for p in paths)
        (count,) = con.execute(f"SELECT count(*) FROM ({union})").fetchone()
        assert count == joined.height, name
        types = {row[0]: row[1] for row in kinds[0]}
        if name == "runs":
            assert types["started_at"] == "TIMESTAMP WITH TIME ZONE" and types["controls"] == "VARCHAR[]"
            assert types["tags"] == "VARCHAR[]" and types["suite_tree_modified"] == "BOOLEAN"
        if name == "controls":
            assert types["energy_j"] == "DOUBLE" and types["answer_lengths_tokens"] == "BIGINT[]"


def test_a_table_without_declared_columns_is_typed_by_its_values_and_an_undeclared_column_is_one_line() -> None:
    from suite.export import frame

    df = frame([{"request": 0, "answer": None, "sizes": [1, 2]}, {"request": 1, "answer": "x", "sizes": []}], {})
    assert df.schema["request"] == pl.Int64 and df.schema["answer"] == pl.String
    assert df.schema["sizes"] == pl.List(pl.Int64) and df.schema["run_id"] == pl.String
    with pytest.raises(SuiteError, match="export table 'gate': column 'extra' is not declared"):
        frame([{"prompt_id": "a", "extra": 1}], {"prompt_id": "str"}, "gate")


def test_csv_exports_of_the_example_trees_concatenate_with_their_schema_numbers_as_numbers(tmp_path: Path) -> None:
    """CSV keeps no types: a column empty in one tree reads as text there. Each CSV table has its
    schema beside it; read with it, every table of every example tree concatenates in polars and
    in DuckDB, with the numeric columns numeric."""
    import json

    from suite.export import polars_csv_types

    duckdb = pytest.importorskip("duckdb")
    written: dict[str, list[Path]] = {}
    for tree in EXAMPLES:
        for path in export_tables(tree, "csv", tmp_path / tree.name):
            assert path.with_suffix(".schema.json").is_file(), path
            written.setdefault(path.stem, []).append(path)
    shared = {name: paths for name, paths in written.items() if len(paths) > 1}
    assert {"runs", "controls", "claims", "requests"} <= set(shared)
    con = duckdb.connect()
    for name, paths in shared.items():
        docs = [json.loads(p.with_suffix(".schema.json").read_text()) for p in paths]
        assert all(d == docs[0] for d in docs), name  # one schema for the table, whatever the tree
        frames = [pl.read_csv(p, schema=polars_csv_types(d)) for p, d in zip(paths, docs, strict=True)]
        joined = pl.concat(frames, how="vertical")
        assert joined.height == sum(f.height for f in frames)
        types = {c: v["duckdb"] for c, v in docs[0]["columns"].items()}
        cols = "{" + ", ".join(f"'{c}': '{t}'" for c, t in types.items()) + "}"
        union = " UNION ALL ".join(f"SELECT * FROM read_csv('{p}', header = true, columns = {cols})" for p in paths)
        described = {row[0]: row[1] for row in con.execute(f"DESCRIBE {union}").fetchall()}
        for column, kind in types.items():
            if kind in ("DOUBLE", "BIGINT"):
                assert described[column] == kind, (name, column, described[column])
        (count,) = con.execute(f"SELECT count(*) FROM ({union})").fetchone()
        assert count == joined.height, name
    runs = json.loads(written["runs"][0].with_suffix(".schema.json").read_text())["columns"]
    assert runs["ttft_p50_ms"]["duckdb"] == "DOUBLE" and runs["j_per_token"]["duckdb"] == "DOUBLE"

"""`suite export`: the golden results tree as Parquet and CSV tables, read back with polars."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from suite.errors import SuiteError
from suite.export import export_tables
from suite.records import load_all

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "results"
REPO = Path(__file__).resolve().parents[2]


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

    lines = sum(1 for p in GOLDEN.rglob("requests.jsonl") for ln in p.read_text().splitlines() if ln.strip())
    assert tables["requests"].height == lines
    assert "<script>" in "".join(tables["requests"]["text"].drop_nulls().to_list())  # data, kept as is
    assert set(tables["latency"]["metric"].to_list()) >= {"ttft_s", "itl_s", "output_tokens_per_s"}
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

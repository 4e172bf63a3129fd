"""Export: the results folder as flat tables (polars), written as Parquet or CSV.

`export_tables(results, fmt, out)` loads every run record (validated, as the site does) and
writes one file per table, in this order:

- `runs`: one row per run: status, determinism mode, signature digest, the suite's commit, tags,
  headline figures (TTFT p50 in ms, tokens/s, J/token);
- `claims`: one row per claim (suite.claims), computed from the records whenever the export is
  made: verdict, test, n, p, family-corrected p, interval or bound, caveats, cost, and whether the
  run printed otherwise when it ended;
- each stage's own tables, in the stage registry's order (`Stage.tables`, defined in the stage's
  module; suite/stages/): `gate` (one row per run and gate prompt: distinct answers, lengths,
  cold vs warm), `batch` (one row per run and batch-composition mode: the target's distinct
  answers with n, how many differ from its one-at-a-time answer, the first departure and the
  logprob gap there, tokens/s and energy), `latency` (one row per run, concurrency level and
  metric: n, mean, p50, p90, p99, min, max, in the row's `unit`: times in ms, as `ttft_ms`),
  `extraction_sections` (one row per run and document
  section), `restarts` (one row per run and gate prompt: within/across-launch figures, agreement
  interval), `controls` (one row per run, control configuration and gate prompt), `sessions` (one
  row per run, configuration and agreement measure: study 2's runs);
- `energy`: one row per run and stage measured on an NVIDIA GPU: joules, mean power, output tokens,
  joules per output token;
- `watchdog`: one row per run: samples, peaks, trip;
- `requests`: one row per recorded request of the kinds the stages export (`Stage.exported_requests`:
  text, timings, errors; token ids left out).

Wherever answers are compared (gate, controls, restarts, sessions) the rows carry how many
answers stopped at max_tokens (`truncated`) beside the count they are part of.

Every row carries `run_id`, `model`, `arm` and `signature_digest`, so any figure can be joined
back to the configuration that produced it. Nothing is run again.

Every table's columns are declared with their types (`ExportTable.columns` for a stage's, `COLUMNS`
here for the others), so a column has the same type in every export, also where every value of it
is empty, and the Parquet tables of two results folders concatenate as they are (polars, DuckDB):
times are UTC timestamps, lists are lists. CSV keeps no types, so each CSV table has its schema
beside it (`<table>.schema.json`: every column's kind, polars dtype and DuckDB type; lists are JSON
arrays there): read with it, the CSV tables of two folders concatenate too. A duration's, an energy's or a
size's unit is in the column's name (`_ms`, `_s`, `_j`, `_w`, `_bytes`; request and latency times
in milliseconds, as `ttft_p50_ms`).

A CSV cell is text a spreadsheet opens: every string cell goes through `suite.sanitize.csv_cell`
(control characters replaced, a cell that would read as a formula prefixed with `'`). Parquet keeps
every value as it was, typed. No symbolic link is followed: not in the results (suite.records),
not among the files written (a link at `<out>/runs.csv` is replaced, the file it names untouched).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import polars as pl

from suite.errors import SuiteError
from suite.paths import FILE_MODE
from suite.records import read_requests
from suite.run_figures import j_per_token
from suite.sanitize import csv_cell
from suite.site.figures import Run, load_runs
from suite.stages import STAGES
from suite.stages.base import ColumnType, ExportTable, Stage

log = logging.getLogger(__name__)

Format = Literal["parquet", "csv"]
# The run's key columns, first in every table.
KEY_COLUMNS: dict[str, ColumnType] = {"run_id": "str", "model": "str", "arm": "str", "signature_digest": "str"}
# A request line's fields as the requests table has them (the line's times, in seconds, as `_ms`).
REQUEST_COLUMNS: dict[str, ColumnType] = {
    "kind": "str", "at": "datetime", "label": "str", "prompt_id": "str", "index": "int", "seed": "int",
    "temperature": "float", "max_tokens": "int", "concurrency": "int", "warmup": "bool", "text": "str",
    "finish_reason": "str", "prompt_tokens": "int", "completion_tokens": "int", "ttft_ms": "float", "e2e_ms": "float",
    "tpot_ms": "float", "error": "str", "section": "str", "repeat": "int", "mode": "str", "trial": "int", "role": "str",
    "position": "int", "batch_size": "int"}
RUNS_COLUMNS: dict[str, ColumnType] = {
    "runtime": "str", "launcher": "str", "profile": "str", "status": "str", "reason": "str",
    "started_at": "datetime", "finished_at": "datetime", "wall_s": "float", "startup_s": "float",
    "determinism_control": "str", "determinism_outcome": "str", "determinism_error_line": "str",
    "runtime_version": "str", "model_format": "str", "model_sha256": "str", "controls": "list[str]",
    "suite_version": "str", "suite_commit": "str", "suite_tree_modified": "bool", "tags": "list[str]",
    "distinct_answers_max": "int", "gate_answered": "int", "gate_requests": "int", "ttft_p50_ms": "float",
    "output_tokens_per_s_p50": "float", "j_per_token": "float", "extraction_clean_share": "float",
    "extraction_clean_share_se": "float", "extraction_identical_sections": "int",
    "extraction_comparable_sections": "int", "extraction_sections": "int"}
CLAIMS_COLUMNS: dict[str, ColumnType] = {
    "stage": "str", "kind": "str", "prompt_id": "str", "configuration": "str", "verdict": "str", "good": "bool",
    "test": "str", "n": "int", "unit": "str", "p": "float", "p_adjusted": "float", "family": "str",
    "family_size": "int", "correction": "str", "interval_low": "float", "interval_high": "float",
    "interval_level": "float", "bound": "float", "caveats": "list[str]", "cost_tokens_per_s_ratio": "float",
    "cost_j_per_token_ratio": "float", "recomputed": "bool", "text": "str",
}
ENERGY_COLUMNS: dict[str, ColumnType] = {
    "stage": "str", "energy_j": "float", "wall_s": "float", "mean_power_w": "float", "output_tokens": "int",
    "j_per_token": "float", "source": "str"}
WATCHDOG_COLUMNS: dict[str, ColumnType] = {
    "tripped": "bool", "samples": "int", "duration_s": "float", "mean_interval_s": "float", "peak_bytes_max": "int",
    "trip_rule": "str", "trip_metric": "str", "trip_value_bytes": "int", "trip_threshold_bytes": "int",
    "trip_t_s": "float", "trip_gone_s": "float"}


def _key(run: Run) -> dict[str, Any]:
    s = run.s
    return {"run_id": s.run_id, "model": s.model, "arm": s.arm,
            "signature_digest": s.signature.digest if s.signature else None}




def runs_rows(runs: list[Run]) -> list[dict[str, Any]]:
    rows = []
    for r in runs:
        s, h, sig = r.s, r.headline, r.s.signature
        ex = s.extraction
        rows.append(_key(r) | {
            "runtime": s.runtime, "launcher": s.launcher, "profile": s.profile, "status": s.status,
            "reason": s.reason, "started_at": s.started_at, "finished_at": s.finished_at,
            "wall_s": s.wall_s, "startup_s": s.startup_s,
            "determinism_control": s.determinism.control, "determinism_outcome": s.determinism.outcome,
            "determinism_error_line": s.determinism.error_line,
            "runtime_version": sig.runtime_version if sig else None,
            "model_format": sig.model_format if sig else None,
            "model_sha256": sig.model_sha256 if sig else None,
            "controls": list(sig.controls) if sig else None,
            "suite_version": (s.suite.version if s.suite else None) or (sig.suite_version if sig else None),
            "suite_commit": s.suite.commit if s.suite else None,
            "suite_tree_modified": s.suite.modified if s.suite else None,
            "tags": [f"{k}={v}" for k, v in s.tags.items()],  # KEY=VALUE, in the order given
            "distinct_answers_max": h.distinct, "gate_answered": h.answered, "gate_requests": h.n,
            "ttft_p50_ms": h.ttft_p50_ms, "output_tokens_per_s_p50": h.tokens_per_s, "j_per_token": j_per_token(s),
            "extraction_clean_share": h.clean_share, "extraction_clean_share_se": h.clean_share_se,
            "extraction_identical_sections": ex.identical_sections if ex else None,
            # the identical count's denominator, as on every page (None: an older record, over all sections)
            "extraction_comparable_sections": ex.comparable_sections if ex else None,
            "extraction_sections": ex.sections if ex else None,
        })
    return rows












def energy_rows(runs: list[Run]) -> list[dict[str, Any]]:
    """One row per run and stage that has an energy figure (an NVIDIA GPU's energy counter)."""
    return [_key(r) | {"stage": name, "energy_j": e.joules} | e.model_dump(exclude={"joules"})
            for r in runs for name, e in r.s.energy.items()]






def _bytes(value: float | None) -> int | None:
    """A byte count as a whole number (a watchdog's figure may be a mean)."""
    return None if value is None else int(round(value))


def watchdog_rows(runs: list[Run]) -> list[dict[str, Any]]:
    rows = []
    for r in runs:
        wd = r.s.watchdog
        if wd is None:
            continue
        trip = wd.trip
        rows.append(_key(r) | {
            "tripped": wd.tripped, "samples": wd.sample_count, "duration_s": wd.duration_s,
            "mean_interval_s": wd.mean_interval_s, "peak_bytes_max": _bytes(max(wd.peaks.values()) if wd.peaks else None),
            "trip_rule": trip.rule if trip else None, "trip_metric": trip.metric if trip else None,
            "trip_value_bytes": _bytes(trip.value_bytes if trip else None),
            "trip_threshold_bytes": _bytes(trip.threshold_bytes if trip else None),
            "trip_t_s": trip.t_s if trip else None, "trip_gone_s": trip.gone_s if trip else None,
        })
    return rows


def requests_rows(runs: list[Run]) -> list[dict[str, Any]]:
    rows = []
    kinds = [kind for stage in STAGES.values() for kind in stage.exported_requests]
    for r in runs:
        for q in read_requests(r.run_dir, kinds):
            row = {f: getattr(q, f, None) for f in REQUEST_COLUMNS}
            for name in ("ttft", "e2e", "tpot"):
                seconds = getattr(q, f"{name}_s", None)
                row[f"{name}_ms"] = seconds * 1000 if seconds is not None else None
            rows.append(_key(r) | row)
    return rows


def claims_rows(runs: list[Run]) -> list[dict[str, Any]]:
    """One row per claim of every run (suite.claims: computed from the records now, as the pages are):
    what is claimed, about which prompt and configuration, its test, n, p and family-corrected p,
    its interval or bound, its caveats and cost, and whether the run printed otherwise when it ended."""
    from suite.claims import claims_of

    rows = []
    for r in runs:
        recomputed = {n.stage for n in getattr(r.s, "recomputed", []) if not n.kept}
        for c in claims_of(r.s):
            ev, fam = c.evidence, c.family
            low, high = ev.interval or (None, None)
            rows.append(_key(r) | {
                "stage": c.stage, "kind": c.kind, "prompt_id": c.prompt, "configuration": c.configuration,
                "verdict": c.verdict, "good": c.good, "test": ev.test, "n": ev.n, "unit": ev.unit, "p": ev.p,
                "p_adjusted": ev.p_adjusted, "family": fam.name if fam else None, "family_size": fam.size if fam else 1,
                "correction": fam.correction if fam else "none", "interval_low": low, "interval_high": high,
                "interval_level": ev.level, "bound": ev.bound, "caveats": list(c.caveats),
                "cost_tokens_per_s_ratio": c.cost.get("tokens_per_s"), "cost_j_per_token_ratio": c.cost.get("j_per_token"),
                "recomputed": c.stage in recomputed, "text": c.text,
            })
    return rows


def stage_table(stage: Stage, table: ExportTable) -> Callable[[list[Run]], list[dict[str, Any]]]:
    """A stage's table over every run: the run's key columns, then the stage's row, for each run
    that has the stage's result."""

    def rows(runs: list[Run]) -> list[dict[str, Any]]:
        return [_key(r) | row for r in runs if (result := getattr(r.s, stage.name, None)) is not None
                for row in table.rows(result)]

    rows.__doc__ = table.rows.__doc__
    return rows


# The runs, then each stage's tables in the registry's order, then the figures of every stage
# (energy), the watchdog's and the request lines: each table's rows, and its declared columns.
TABLES: dict[str, Callable[[list[Run]], list[dict[str, Any]]]] = {
    "runs": runs_rows,
    "claims": claims_rows,
    **{table.name: stage_table(stage, table) for stage in STAGES.values() for table in stage.tables},
    "energy": energy_rows,
    "watchdog": watchdog_rows,
    "requests": requests_rows,
}
COLUMNS: dict[str, dict[str, ColumnType]] = {
    "runs": RUNS_COLUMNS,
    "claims": CLAIMS_COLUMNS,
    **{table.name: table.columns for stage in STAGES.values() for table in stage.tables},
    "energy": ENERGY_COLUMNS,
    "watchdog": WATCHDOG_COLUMNS,
    "requests": REQUEST_COLUMNS,
}

DTYPES: dict[str, Any] = {
    "str": pl.String, "int": pl.Int64, "float": pl.Float64, "bool": pl.Boolean,
    "datetime": pl.Datetime("us", "UTC"), "list[str]": pl.List(pl.String), "list[int]": pl.List(pl.Int64),
    "list[float]": pl.List(pl.Float64),
}


def schema(columns: dict[str, ColumnType]) -> dict[str, Any]:
    """A table's polars schema: the run's key columns, then its declared ones."""
    return {name: DTYPES[kind] for name, kind in (KEY_COLUMNS | columns).items()}


def _cell(value: Any, kind: ColumnType) -> Any:
    if value is None:
        return None
    if kind == "datetime" and isinstance(value, str):
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    if kind == "float" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind == "int" and isinstance(value, float) and value.is_integer():  # a byte count read as a float
        return int(value)
    return value


def inferred_columns(rows: list[dict[str, Any]]) -> dict[str, ColumnType]:
    """The columns of a stage table that declares none (a stage from before declared columns): in
    the rows' order, each typed by its first value (a column with none is text)."""
    kinds: dict[str, ColumnType] = {}
    for row in rows:
        for name, value in row.items():
            if name in KEY_COLUMNS or (name in kinds and value is None):
                continue
            if name not in kinds or kinds[name] == "str" and value is not None and not isinstance(value, str):
                kinds[name] = _kind_of(value)
    return kinds


def _kind_of(value: Any) -> ColumnType:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, (list, tuple)):
        inner = {_kind_of(v) for v in value if v is not None}
        return "list[int]" if inner == {"int"} else "list[float]" if inner <= {"int", "float"} and inner else "list[str]"
    return "str"


def frame(rows: list[dict[str, Any]], columns: dict[str, ColumnType], table: str = "table") -> pl.DataFrame:
    """Rows as a DataFrame of the table's declared columns and types (a row's missing column is
    empty); a row with a column the table does not declare is an error naming both."""
    columns = columns or inferred_columns(rows)
    kinds = KEY_COLUMNS | columns
    for row in rows:
        extra = [k for k in row if k not in kinds]
        if extra:
            raise SuiteError(f"export table {table!r}: column {extra[0]!r} is not declared in its columns")
    types = schema(columns)
    series = []
    for name, kind in kinds.items():
        values = [_cell(row.get(name), kind) for row in rows]
        try:
            series.append(pl.Series(name, values, dtype=types[name], strict=True))
        except (TypeError, ValueError, pl.exceptions.PolarsError) as exc:
            bad = next((v for v in values if v is not None), None)
            raise SuiteError(f"export table {table!r}: column {name!r} is declared {kind}, but holds "
                             f"{bad!r} ({type(bad).__name__}): {str(exc).splitlines()[0]}") from None
    return pl.DataFrame(series)


def for_csv(df: pl.DataFrame) -> pl.DataFrame:
    """CSV has no lists: a list column's cells as JSON arrays (`[973, 993]`)."""
    lists = [name for name, dtype in df.schema.items() if isinstance(dtype, pl.List)]
    return df.with_columns(pl.col(name).map_elements(lambda v: json.dumps(v.to_list()), return_dtype=pl.String)
                           for name in lists) if lists else df


def csv_safe(df: pl.DataFrame) -> pl.DataFrame:
    """The frame with every string cell made a CSV cell a spreadsheet shows as text (`csv_cell`)."""
    text = [c for c, dtype in df.schema.items() if dtype == pl.String]
    return df.with_columns(pl.col(c).map_elements(csv_cell, return_dtype=pl.String) for c in text) if text else df


# Each column kind as DuckDB reads it from a CSV file (a list is a JSON array there: text).
DUCKDB_TYPES: dict[str, str] = {
    "str": "VARCHAR", "int": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN", "datetime": "TIMESTAMPTZ",
    "list[str]": "VARCHAR", "list[int]": "VARCHAR", "list[float]": "VARCHAR",
}


def csv_schema(columns: dict[str, ColumnType]) -> dict[str, Any]:
    """The schema written beside a CSV table (`<table>.schema.json`): every column's kind, its
    polars dtype and its DuckDB type, so that a reader types a column that is empty in one tree as
    it is in the others (CSV itself keeps no types); list columns are JSON arrays in the CSV."""
    kinds = KEY_COLUMNS | columns
    return {"format": "csv", "lists": "JSON arrays",
            "columns": {name: {"kind": kind, "polars": "String" if kind.startswith("list") else str(DTYPES[kind]),
                               "duckdb": DUCKDB_TYPES[kind]} for name, kind in kinds.items()}}


def polars_csv_types(schema_doc: dict[str, Any]) -> dict[str, Any]:
    """The polars dtypes of a CSV table from its schema file (lists as text: JSON arrays)."""
    return {name: (pl.String if c["kind"].startswith("list") else DTYPES[c["kind"]])
            for name, c in schema_doc["columns"].items()}


def _replace(path: Path, write: Callable[[str], object], what: str) -> None:
    """Write a file through a temporary file of its folder and a rename: a symbolic link at `path`
    is replaced, never followed (the file it points to is left as it was)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except OSError as exc:
        raise SuiteError(f"{path}: cannot write {what}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _write_table(df: pl.DataFrame, path: Path, fmt: str) -> None:
    """One table, Parquet or CSV (`_replace`)."""
    if fmt == "parquet":
        _replace(path, df.write_parquet, "the export")
    else:
        _replace(path, csv_safe(for_csv(df)).write_csv, "the export")


def _write_schema(path: Path, doc: dict[str, Any]) -> None:
    """The schema file beside a CSV table (`_replace`)."""
    _replace(path, lambda tmp: Path(tmp).write_text(json.dumps(doc, indent=1)), "the export's schema")


def export_tables(results_dir: Path, fmt: str, out_dir: Path) -> list[Path]:
    """Write every non-empty table as `<out>/<table>.<fmt>`; return the paths written."""
    if fmt not in ("parquet", "csv"):
        raise SuiteError(f"unknown export format {fmt!r}; known: parquet, csv")
    models = load_runs(Path(results_dir))
    runs = sorted((r for m in models.values() for a in m.arms.values() for r in a.runs),
                  key=lambda r: (r.s.started_at, r.s.run_id))
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise SuiteError(f"{out_dir}: exists and is not a folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name, build in TABLES.items():
        columns = COLUMNS[name]
        rows = build(runs)
        if not rows and name != "runs":
            log.info("export: no %s rows; %s not written", name, name)
            continue
        df = frame(rows, columns, name)
        path = out_dir / f"{name}.{fmt}"
        _write_table(df, path, fmt)
        if fmt == "csv":
            _write_schema(out_dir / f"{name}.schema.json", csv_schema(columns or inferred_columns(rows)))
        log.info("export: %s (%d rows)", path, df.height)
        written.append(path)
    return written


# The tables a model page offers for download, as shown on it: its runs and its claims.
PAGE_TABLES = ("runs", "claims")


def page_downloads(runs: list[Run], out_dir: Path) -> dict[str, dict[str, str]]:
    """A model page's tables as files beside it (`<table>.csv` with its `<table>.schema.json`, and
    `<table>.json`, one object per row), from the same rows `suite export` writes, so the figures a
    reader downloads are the page's. Returns table -> format -> file name (relative to `out_dir`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    ordered = sorted(runs, key=lambda r: (r.s.started_at, r.s.run_id))
    out: dict[str, dict[str, str]] = {}
    for name in PAGE_TABLES:
        rows = TABLES[name](ordered)
        columns = COLUMNS[name] or inferred_columns(rows)
        df = frame(rows, columns, name)
        _write_table(df, out_dir / f"{name}.csv", "csv")
        _write_schema(out_dir / f"{name}.schema.json", csv_schema(columns))
        doc = json.dumps({"schema_version": 1, "table": name, "rows": df.to_dicts()}, indent=1, default=str)

        def write_json(tmp: str, text: str = doc) -> None:
            Path(tmp).write_text(text)

        _replace(out_dir / f"{name}.json", write_json, "the download")
        out[name] = {"csv": f"{name}.csv", "json": f"{name}.json", "schema": f"{name}.schema.json"}
    return out


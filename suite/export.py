"""Export: the results folder as flat tables (polars), written as Parquet or CSV.

`export_tables(results, fmt, out)` loads every run record (validated, as the site does) and
writes one file per table, in this order:

- `runs`: one row per run: status, determinism mode, signature digest, headline figures;
- each stage's own tables, in the stage registry's order (`Stage.tables`, defined in the stage's
  module; suite/stages/): `gate` (one row per run and gate prompt: distinct answers, lengths,
  cold vs warm), `batch` (one row per run and batch-composition mode: the target's distinct
  answers with n, how many differ from its one-at-a-time answer, the first departure and the
  logprob gap there, tokens/s and energy), `latency` (one row per run, concurrency level and
  metric: n, mean, p50, p90, p99, min, max), `extraction_sections` (one row per run and document
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

A CSV cell is text a spreadsheet opens: every string cell goes through `suite.sanitize.csv_cell`
(control characters replaced, a cell that would read as a formula prefixed with `'`). Parquet keeps
every value as it was, typed. No symbolic link is followed: not in the results (suite.records),
not among the files written (a link at `<out>/runs.csv` is replaced, the file it names untouched).
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Literal

import polars as pl

from suite.errors import SuiteError
from suite.paths import FILE_MODE
from suite.records import read_requests
from suite.sanitize import csv_cell
from suite.site.figures import Run, load_runs
from suite.stages import STAGES
from suite.stages.base import ExportTable, Stage, export_cell

log = logging.getLogger(__name__)

Format = Literal["parquet", "csv"]
REQUEST_FIELDS = ("kind", "at", "label", "prompt_id", "index", "seed", "temperature", "max_tokens",
                  "concurrency", "warmup", "text", "finish_reason", "prompt_tokens", "completion_tokens",
                  "ttft_s", "e2e_s", "tpot_s", "error", "section", "repeat", "mode", "trial", "role", "position",
                  "batch_size")


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
            "controls": ", ".join(sig.controls) if sig else None,
            "suite_version": sig.suite_version if sig else None,
            "distinct_answers_max": h.distinct, "gate_answered": h.answered, "gate_requests": h.n,
            "ttft_p50_ms": h.ttft_p50_ms, "output_tokens_per_s_p50": h.tokens_per_s,
            "extraction_clean_share": h.clean_share, "extraction_clean_share_se": h.clean_share_se,
            "extraction_identical_sections": ex.identical_sections if ex else None,
            # the identical count's denominator, as on every page (None: an older record, over all sections)
            "extraction_comparable_sections": ex.comparable_sections if ex else None,
            "extraction_sections": ex.sections if ex else None,
        })
    return rows












def energy_rows(runs: list[Run]) -> list[dict[str, Any]]:
    """One row per run and stage that has an energy figure (an NVIDIA GPU's energy counter)."""
    return [_key(r) | {"stage": name} | e.model_dump() for r in runs for name, e in r.s.energy.items()]






def watchdog_rows(runs: list[Run]) -> list[dict[str, Any]]:
    rows = []
    for r in runs:
        wd = r.s.watchdog
        if wd is None:
            continue
        trip = wd.trip
        rows.append(_key(r) | {
            "tripped": wd.tripped, "samples": wd.sample_count, "duration_s": wd.duration_s,
            "mean_interval_s": wd.mean_interval_s, "peak_bytes_max": max(wd.peaks.values()) if wd.peaks else None,
            "trip_rule": trip.rule if trip else None, "trip_metric": trip.metric if trip else None,
            "trip_value_bytes": trip.value_bytes if trip else None,
            "trip_threshold_bytes": trip.threshold_bytes if trip else None,
            "trip_t_s": trip.t_s if trip else None, "trip_gone_s": trip.gone_s if trip else None,
        })
    return rows


def requests_rows(runs: list[Run]) -> list[dict[str, Any]]:
    rows = []
    kinds = [kind for stage in STAGES.values() for kind in stage.exported_requests]
    for r in runs:
        for q in read_requests(r.run_dir, kinds):
            rows.append(_key(r) | {f: export_cell(getattr(q, f, None)) for f in REQUEST_FIELDS})
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
# (energy), the watchdog's and the request lines.
TABLES: dict[str, Callable[[list[Run]], list[dict[str, Any]]]] = {
    "runs": runs_rows,
    **{table.name: stage_table(stage, table) for stage in STAGES.values() for table in stage.tables},
    "energy": energy_rows,
    "watchdog": watchdog_rows,
    "requests": requests_rows,
}


def frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Rows as a DataFrame; every column's type is inferred from all rows, not the first few."""
    return pl.DataFrame(rows, infer_schema_length=None)


def csv_safe(df: pl.DataFrame) -> pl.DataFrame:
    """The frame with every string cell made a CSV cell a spreadsheet shows as text (`csv_cell`)."""
    text = [c for c, dtype in df.schema.items() if dtype == pl.String]
    return df.with_columns(pl.col(c).map_elements(csv_cell, return_dtype=pl.String) for c in text) if text else df


def _write_table(df: pl.DataFrame, path: Path, fmt: str) -> None:
    """Write one table through a temporary file of the folder and a rename: a symbolic link at
    `path` is replaced, never followed (the file it points to is left as it was)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        if fmt == "parquet":
            df.write_parquet(tmp)
        else:
            csv_safe(df).write_csv(tmp)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except OSError as exc:
        raise SuiteError(f"{path}: cannot write the export: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


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
        rows = build(runs)
        if not rows and name != "runs":
            log.info("export: no %s rows; %s not written", name, name)
            continue
        df = frame(rows)
        path = out_dir / f"{name}.{fmt}"
        _write_table(df, path, fmt)
        log.info("export: %s (%d rows)", path, df.height)
        written.append(path)
    return written

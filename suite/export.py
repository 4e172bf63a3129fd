"""Export: the results folder as flat tables (polars), written as Parquet or CSV.

`export_tables(results, fmt, out)` loads every run record (validated, as the site does) and
writes one file per table:

- `runs`: one row per run: status, determinism mode, signature digest, headline figures;
- `gate`: one row per run and gate prompt: distinct answers, lengths, cold vs warm;
- `controls`: one row per run, control configuration and gate prompt;
- `restarts`: one row per run and gate prompt: within/across-launch figures, agreement interval;
- `sessions`: one row per run, configuration and agreement measure (study 2's runs);
- `batch`: one row per run and batch-composition mode: the target's distinct answers with n, how
  many differ from its one-at-a-time answer, the first departure and the logprob gap there,
  tokens/s and energy;
- `energy`: one row per run and stage measured on an NVIDIA GPU: joules, mean power, output tokens,
  joules per output token;
- `latency`: one row per run, concurrency level and metric: n, mean, p50, p90, p99, min, max;
- `extraction_sections`: one row per run and document section;
- `watchdog`: one row per run: samples, peaks, trip;
- `requests`: one row per recorded request (text, timings, errors; token ids left out).

Wherever answers are compared (gate, controls, restarts, sessions) the rows carry how many
answers stopped at max_tokens (`truncated`) beside the count they are part of.

Every row carries `run_id`, `model`, `arm` and `signature_digest`, so any figure can be joined
back to the configuration that produced it. Nothing is run again.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

import polars as pl

from suite.errors import SuiteError
from suite.records import read_requests
from suite.site.figures import Run, distributions, load_runs, row_truncation

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


def _scalar(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return ", ".join(str(x) for x in v)
    if isinstance(v, dict):
        return None
    return v


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


def gate_rows(runs: list[Run]) -> list[dict[str, Any]]:
    rows = []
    for r in runs:
        for p in r.s.gate.prompts if r.s.gate else []:
            cw = p.cold_warm
            rows.append(_key(r) | {
                "prompt_id": p.prompt_id, "requests": p.requests, "answered": p.answered, "errors": p.errors,
                "distinct_answers": p.distinct_answers, "modal_share": p.modal_share,
                "lengths": p.lengths_text, "compared_by": p.compared_by,
                "truncated": p.truncated, "max_tokens": p.max_tokens, "modal_tied": p.modal_tied,
                "cold_is_modal": cw.cold_is_modal if cw else None, "warm_distinct": cw.warm_distinct if cw else None,
                "warm_count": cw.warm_count if cw else None,
            })
    return rows


def controls_rows(runs: list[Run]) -> list[dict[str, Any]]:
    rows = []
    for r in runs:
        for row in r.s.controls.rows if r.s.controls else []:
            e = row.energy
            base = _key(r) | {"configuration": row.configuration, "status": row.status, "reason": row.reason,
                              "concurrency": row.concurrency, "startup_s": row.startup_s,
                              "controls": ", ".join(row.ran_controls),
                              "tokens_per_s": row.tokens_per_s, "energy_j": e.joules if e else None,
                              "j_per_token": e.j_per_token if e else None,
                              "mean_power_w": e.mean_power_w if e else None}
            cut = row_truncation(row.gate)
            if not row.distinct:
                rows.append(base | {"prompt_id": None, "distinct_answers": None, "answered": None, "lengths": None,
                                    "truncated": None, "max_tokens": None})
            for pid, d in row.distinct.items():
                rows.append(base | {"prompt_id": pid, "distinct_answers": d, "answered": row.answered.get(pid),
                                    "lengths": row.lengths.get(pid), "truncated": cut.get(pid, (None, None))[0],
                                    "max_tokens": cut.get(pid, (None, None))[1]})
    return rows


def restarts_rows(runs: list[Run]) -> list[dict[str, Any]]:
    rows = []
    for r in runs:
        rs = r.s.restarts
        for p in rs.prompts if rs else []:
            low, high = p.agreement_ci95 or (None, None)
            rows.append(_key(r) | {
                "launches": rs.launches, "launched": rs.launched, "prompt_id": p.prompt_id,
                "within_distinct": _scalar(p.within_distinct), "across_distinct": p.across_distinct,
                "agreement": p.agreement, "agreement_ci95_low": low, "agreement_ci95_high": high,
                "lengths": p.lengths_text, "answered": p.answered or sum(x.answered for x in p.per_launch),
                "truncated": p.truncated, "cache_mode": rs.cache_mode, "controls": ", ".join(rs.controls),
                "cache_files_before": _scalar([o.cache_files_before for o in rs.launch_outcomes]),
            })
    return rows


def sessions_rows(runs: list[Run]) -> list[dict[str, Any]]:
    """Study 2's table: per configuration, each agreement measure between runs (one pass over the
    prompt set) across sessions with its interval, and within sessions."""
    rows = []
    for r in runs:
        ss = r.s.sessions
        for c in ss.configurations if ss else []:
            base = _key(r) | {"sessions": ss.sessions, "replicates": ss.replicates, "configuration": c.label,
                              "status": c.status, "reason": c.reason, "controls": ", ".join(ss.controls)}
            runs_ = c.runs
            if runs_ is None:
                rows.append(base)
                continue
            for a in runs_.agreements:
                low, high = a.across_ci95 or (None, None)
                rows.append(base | {
                    "runs": runs_.runs, "distinct_runs": runs_.distinct_runs, "prompts": runs_.items,
                    "incomplete_runs": runs_.incomplete_runs, "truncated": runs_.truncated,
                    "measure": a.measure, "across": a.across, "across_ci95_low": low, "across_ci95_high": high,
                    "across_pairs": a.across_pairs, "ci_note": a.ci_note, "within": a.within,
                    "within_pairs": a.within_pairs, "first_run_only_difference": runs_.transient_only,
                })
    return rows


def batch_rows(runs: list[Run]) -> list[dict[str, Any]]:
    rows = []
    for r in runs:
        b = r.s.batch
        for m in b.modes if b else []:
            d = m.first_divergence
            rows.append(_key(r) | {
                "prompt_id": b.prompt_id, "mode": m.mode, "trials": m.trials, "batch_sizes": _scalar(m.batch_sizes),
                "requests": m.requests, "failed": m.failed, "answered": m.target.answered,
                "distinct_answers": m.target.distinct_answers, "same_as_single": m.same_as_single,
                "differ_from_single": m.differ_from_single,
                "first_divergence_token": d.token_index if d else None,
                "logprob_reference": d.modal_logprob if d else None, "logprob_other": d.other_logprob if d else None,
                "reference_margin": d.modal_margin if d else None,
                "same_tokens_logprob_diff": m.same_tokens_logprob_diff, "output_tokens": m.output_tokens,
                "wall_s": m.wall_s, "tokens_per_s": m.tokens_per_s, "energy_j": m.energy_j,
                "j_per_token": m.j_per_token, "cache_reset": b.cache_reset, "varies_with_batch": b.varies_with_batch,
            })
    return rows


def energy_rows(runs: list[Run]) -> list[dict[str, Any]]:
    """One row per run and stage that has an energy figure (an NVIDIA GPU's energy counter)."""
    return [_key(r) | {"stage": name} | e.model_dump() for r in runs for name, e in r.s.energy.items()]


def latency_rows(runs: list[Run]) -> list[dict[str, Any]]:
    rows = []
    for r in runs:
        for level in r.s.latency.levels if r.s.latency else []:
            for metric, m in distributions(level).items():
                rows.append(_key(r) | {"concurrency": level.concurrency, "metric": metric} |
                            m.dist.model_dump(include={"n", "mean", "p50", "p90", "p99", "min", "max"}))
    return rows


def extraction_rows(runs: list[Run]) -> list[dict[str, Any]]:
    rows = []
    for r in runs:
        for sec in r.s.extraction.per_section if r.s.extraction else []:
            rows.append(_key(r) | {k: _scalar(v) for k, v in sec.model_dump().items()})
    return rows


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
    kinds = ("gate", "batch", "latency", "controls", "restarts", "extraction", "extraction-fact", "judge")
    for r in runs:
        for q in read_requests(r.run_dir, kinds):
            rows.append(_key(r) | {f: _scalar(getattr(q, f, None)) for f in REQUEST_FIELDS})
    return rows


TABLES = {
    "runs": runs_rows,
    "gate": gate_rows,
    "controls": controls_rows,
    "restarts": restarts_rows,
    "sessions": sessions_rows,
    "batch": batch_rows,
    "energy": energy_rows,
    "latency": latency_rows,
    "extraction_sections": extraction_rows,
    "watchdog": watchdog_rows,
    "requests": requests_rows,
}


def frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Rows as a DataFrame; every column's type is inferred from all rows, not the first few."""
    return pl.DataFrame(rows, infer_schema_length=None)


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
        if fmt == "parquet":
            df.write_parquet(path)
        else:
            df.write_csv(path)
        log.info("export: %s (%d rows)", path, df.height)
        written.append(path)
    return written

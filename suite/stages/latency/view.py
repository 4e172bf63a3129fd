"""The latency stage's part of a model page: per metric, n and percentiles per arm at the level
the pages show (one request at a time), and one row per concurrency level where there were more.
The charts beside them (TTFT, inter-token latency, the sweep) are drawn by the site from the
request lines and reach the template as the page's `ttft_svg`, `itl_svg` and `sweep_svg`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from suite.analysis.stats import Distribution, distribution_fields
from suite.stages.base import PageInputs
from suite.stages.latency.result import LatencyLevel, LatencyResult


@dataclass
class Metric:
    """One measured distribution of a result, with the unit its model's field declares."""

    dist: Distribution
    unit: str  # s, ms, tokens, tok/s (the field's `unit` metadata)


def distributions(model: BaseModel | None, prefix: str = "") -> dict[str, Metric]:
    """Every Distribution field of a model, nested models included, by dotted field name, in the
    model's field order, with the unit its field declares."""
    return {name: Metric(dist, unit) for name, (dist, unit) in distribution_fields(model, prefix).items()}


def latency_level(latency: LatencyResult | None) -> LatencyLevel | None:
    """The latency level the pages show: one request at a time (else the first level)."""
    if latency is None or not latency.levels:
        return None
    return next((lv for lv in latency.levels if lv.concurrency == 1), latency.levels[0])


def latency_metrics(latency: LatencyResult | None) -> dict[str, Metric]:
    """Every percentile summary of the level the pages show, by metric name."""
    return distributions(latency_level(latency))


def latency_sweep(latency: LatencyResult | None) -> list[dict[str, Any]]:
    """One row per concurrency level: TTFT, ITL (ms), aggregate tokens/s, and the client's own state.

    `saturated` is True where the suite's client was at its limit at that level (its event loop
    lagged or it used a whole core: `suite.stages.latency.ClientLoad`), False where it kept up,
    None where the record does not say (one request at a time).
    """
    def ms(v: float | None) -> float | None:
        return None if v is None else v * 1000.0

    rows = [{
        "concurrency": lv.concurrency, "requests": lv.requests, "failed": lv.failed,
        "ttft_p50_ms": ms(lv.ttft_s.p50), "ttft_p99_ms": ms(lv.ttft_s.p99),
        "itl_p50_ms": ms(lv.itl_s.p50), "itl_p99_ms": ms(lv.itl_s.p99),
        "tokens_per_s": lv.throughput_tokens_per_s,
        "lag_p99_ms": lv.client.loop_lag_ms.p99 if lv.client else None,
        "cpu_share": lv.client.cpu_share if lv.client else None,
        "saturated": lv.client.saturated if lv.client else None,
        "reason": lv.client.reason if lv.client else None,
    } for lv in (latency.levels if latency else [])]
    return sorted(rows, key=lambda r: r["concurrency"])


# A latency field's label on the pages, by field name (the unit comes from the field itself).
METRIC_LABELS = {
    "ttft_s": "Time to first token",
    "itl_s": "Inter-token latency",
    "tpot_s": "Time per output token",
    "e2e_s": "End-to-end (to the last token)",
    "stream_close_s": "Request to the stream's close",
    "prompt_tokens": "Prompt tokens per request",
    "prompt_cached_tokens": "Prompt tokens from the runtime's cache",
    "overhead_ms": "Client overhead (outside HTTP)",
    "record_ms": "Writing the request record",
    "output_tokens_per_s": "Output tokens/s",
    "output_tokens": "Output tokens per request",
}
# Stored unit -> (unit shown, factor): times are shown in milliseconds.
SHOWN_UNITS = {"s": ("ms", 1000.0), "ms": ("ms", 1.0)}


def metric_label(name: str, unit: str) -> tuple[str, str, float]:
    """A metric's label, the unit it is shown in and the factor from its stored unit to that one."""
    base = name.split(".")[-1]
    prefix = name[: -len(base)]
    shown, factor = SHOWN_UNITS.get(unit, (unit, 1.0))
    if prefix == "runtime_timings." and base.endswith("_diff_ms"):
        what = METRIC_LABELS.get(base[:-len("_diff_ms")] + "_s", base.upper())
        return f"{what}: ours − the runtime's own", shown, factor
    label = METRIC_LABELS.get(base, base.replace("_", " "))
    return (prefix.replace(".", " ") + label).strip(), shown, factor


@dataclass
class LatencyRow:
    label: str
    unit: str
    cells: list[dict[str, Any] | None]  # per arm: n, p50, p90, p99 in the unit


def latency_table(results: list[LatencyResult | None]) -> list[LatencyRow]:
    """One row per latency metric, one cell per arm's result (the level the pages show), in the metric's unit."""
    per_arm = [latency_metrics(r) for r in results]
    names = list(dict.fromkeys(k for m in per_arm for k in m))
    rows = []
    for name in names:
        label, unit, factor = metric_label(name, next(m[name].unit for m in per_arm if name in m))
        cells: list[dict[str, Any] | None] = []
        for m in per_arm:
            if name not in m:
                cells.append(None)
                continue
            d = m[name].dist
            cells.append({q: (None if getattr(d, q) is None else getattr(d, q) * factor)
                          for q in ("p50", "p90", "p99", "mean", "min", "max")} | {"n": d.n})
        rows.append(LatencyRow(label=label, unit=unit, cells=cells))
    return rows


def page(results: list[LatencyResult | None], inputs: PageInputs) -> dict[str, Any]:
    """The section's variables: the metrics table, each arm's level and its concurrency sweep."""
    return {"latency_rows": latency_table(results), "latency_levels": [latency_level(r) for r in results],
            "latency_sweeps": [latency_sweep(r) for r in results]}

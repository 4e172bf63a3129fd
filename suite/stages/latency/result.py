"""The latency stage's records: per concurrency level the suite's timings as distributions
(`LatencyLevel`), the runtime's own timings beside them (`RuntimeTimings`), the client's own load
and whether it kept up (`ClientLoad`, with the thresholds that call a level saturated), the
stage's result (`LatencyResult`), the export's latency table and the stage's request line
(`LatencyLine`). Nothing here sends a request; `suite.stages.latency.run` fills these records."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from suite.analysis.stats import Distribution, distribution_fields
from suite.stages.base import ColumnType
from suite.stages.lines import RequestLineBase

RESULT_VERSION = 2  # 2: unique prompt prefix per request, token-chunk timing, per-request vLLM metrics (`client` per level: optional, added)


# The client's own limit. Above one request at a time, the streams run on one asyncio event loop
# (`AsyncOpenAIClient`); a probe task asks to wake every LAG_PROBE_S and records how late it woke.
# That lateness is how long a chunk that reached the socket could wait before the client
# timestamped it: the client's timing error. A level is marked saturated when the probe's p99 is
# over SATURATION_LAG_SHARE of the level's median inter-token gap (at least
# SATURATION_LAG_FLOOR_S), or when the client process used more than SATURATION_CPU_SHARE of a
# core: its figures then describe the client, not the runtime.
LAG_PROBE_S = 0.005
SATURATION_LAG_FLOOR_S = 0.002  # asyncio rounds its epoll timeouts up to the millisecond: ~1 ms lag at rest
SATURATION_LAG_SHARE = 0.10
SATURATION_CPU_SHARE = 0.90


# The recorded `source` of runtime timings, by where they came from: the `timings` object of each
# reply ([timings]), or the histograms of /metrics ([metrics]). The labels are the records' own
# since the first of them (llama-server and vLLM were the runtimes reporting each).
TIMINGS_SOURCE: Literal["llama-server timings"] = "llama-server timings"
METRICS_SOURCE: Literal["vllm /metrics"] = "vllm /metrics"


class RuntimeTimings(BaseModel):
    """What the runtime itself reported for the measured requests, and how far ours are from it."""

    source: Literal["llama-server timings", "vllm /metrics"] = Field(description="where the figures come from")
    n: int = Field(description="requests the runtime reported on")
    n_ttft: int | None = Field(default=None, description="vLLM: requests in the TTFT histogram's delta")
    n_tpot: int | None = Field(default=None, description="vLLM: requests in the per-request TPOT histogram's delta")
    n_e2e: int | None = Field(default=None, description="vLLM: requests in the e2e histogram's delta")
    ttft_mean_s: float | None = Field(default=None, description="runtime's mean TTFT (llama-server: prompt time)")
    tpot_mean_s: float | None = Field(default=None, description="runtime's mean time per output token")
    e2e_mean_s: float | None = Field(default=None, description="runtime's mean request time")
    ttft_diff_ms: Distribution | None = Field(json_schema_extra={"unit": "ms"},
        default=None, description="per request, our TTFT minus the runtime's, ms (llama-server only)")
    tpot_diff_ms: Distribution | None = Field(json_schema_extra={"unit": "ms"},
        default=None, description="per request, our TPOT minus the runtime's, ms (llama-server only)")
    ttft_mean_diff_ms: float | None = Field(default=None, description="our mean TTFT minus the runtime's, ms")
    tpot_mean_diff_ms: float | None = Field(default=None, description="our mean TPOT minus the runtime's, ms")
    e2e_mean_diff_ms: float | None = Field(default=None, description="our mean e2e minus the runtime's, ms")


class ClientLoad(BaseModel):
    """How hard the suite's client worked at one level, and whether it kept up (concurrent levels)."""

    loop_lag_ms: Distribution = Field(json_schema_extra={"unit": "ms"},
        description=f"event-loop lag: how late a probe that asks to wake every {LAG_PROBE_S * 1000:g} ms woke, ms")
    cpu_share: float | None = Field(
        default=None, description="the suite process's CPU time over the level's wall time (1.0 = one core busy)")
    parse_share: float | None = Field(
        default=None, description="time parsing streamed chunks over the level's wall time")
    lag_threshold_ms: float = Field(description="loop-lag p99 above which the level counts as saturated, ms")
    saturated: bool = Field(description="the client was at its limit: the level's figures describe the client")
    reason: str | None = Field(default=None, description="why the level counts as saturated")


class LatencyLevel(BaseModel):
    """Latency at one concurrency level (requests in flight at once)."""

    concurrency: int = Field(description="requests in flight at once")
    requests: int = Field(description="measured requests sent (warm-up excluded)")
    failed: int = Field(description="measured requests that got an HTTP or protocol error")
    incomplete: int = Field(
        default=0, description="streams that ended without a finish reason (cut off by the runtime); not in the figures")
    wall_s: float = Field(description="wall time of the measured requests of this level")
    first_index: int | None = Field(
        default=None, description="prompt-prefix index of the level's first request (then one per request)")
    ttft_s: Distribution = Field(json_schema_extra={"unit": "s"}, description="time to first token, seconds")
    itl_s: Distribution = Field(json_schema_extra={"unit": "s"}, description="inter-token latency: gaps between streamed chunks, seconds")
    tpot_s: Distribution = Field(json_schema_extra={"unit": "s"}, description="time per output token after the first, seconds")
    e2e_s: Distribution = Field(json_schema_extra={"unit": "s"}, description="end-to-end request latency, seconds (to the last token chunk)")
    stream_close_s: Distribution | None = Field(json_schema_extra={"unit": "s"},
        default=None, description="request sent to the stream's close ([DONE] or end of body), seconds")
    prompt_tokens: Distribution | None = Field(json_schema_extra={"unit": "tokens"},
        default=None, description="prompt tokens per request, as the runtime counted them (one value when the prefix works)")
    prompt_cached_tokens: Distribution | None = Field(json_schema_extra={"unit": "tokens"},
        default=None, description="prompt tokens the runtime took from its cache (llama-server `cache_n`), per request")
    output_tokens: Distribution = Field(json_schema_extra={"unit": "tokens"}, description="tokens generated per request")
    output_tokens_per_s: Distribution = Field(json_schema_extra={"unit": "tok/s"}, description="per request, tokens / e2e")
    throughput_tokens_per_s: float | None = Field(
        default=None, description="all tokens of the level / its wall time (aggregate rate)")
    overhead_ms: Distribution = Field(json_schema_extra={"unit": "ms"},
        description="the client's own time per request outside the HTTP exchange (body, stream parsing), ms")
    record_ms: Distribution | None = Field(json_schema_extra={"unit": "ms"},
        default=None, description="the stage's time per request writing its record to requests.jsonl, ms")
    runtime_timings: RuntimeTimings | None = Field(
        default=None, description="the runtime's own timings of the same requests, when it reports them")
    client: ClientLoad | None = Field(
        default=None, description="the client's own load and lag (concurrent levels; None: one request at a time)")

    @property
    def saturated(self) -> bool:
        return bool(self.client and self.client.saturated)


class LatencyResult(BaseModel):
    """Summary of the latency stage for one arm (per-request detail is in requests.jsonl)."""

    version: int = Field(default=RESULT_VERSION, description="schema version of this result")
    prompt_id: str = Field(description="id of the fixed prompt")
    endpoint: str = Field(description="API path used (streamed)")
    max_tokens: int = Field(description="max_tokens of every request")
    warmup: int = Field(description="warm-up requests sent first and not counted")
    prompt_cache: Literal["unique-prefix"] | None = Field(
        default=None, description="how a prompt-cache hit was avoided: unique-prefix = a nonce before every prompt; "
        "None (records before version 2) = one repeated prompt, TTFT a cache hit after warm-up")
    prompt_prefix: str | None = Field(default=None, description="the nonce's template, before the fixed prompt")
    levels: list[LatencyLevel] = Field(description="one entry per concurrency level, in order")
    signature_digest: str = Field(description="configuration signature of the arm")


def export_rows(result: LatencyResult) -> list[dict[str, Any]]:
    """`suite export`'s latency table: one row per concurrency level and metric: n, mean, p50, p90, p99, min, max.

    Times are in milliseconds, as everywhere in the export: a metric kept in seconds (`ttft_s`) is
    exported as `ttft_ms`; `unit` names the figures' unit (ms, tokens, tok/s)."""
    rows = []
    stats = ("n", "mean", "p50", "p90", "p99", "min", "max")
    for level in result.levels:
        for metric, (dist, unit) in distribution_fields(level).items():
            figures = dist.model_dump(include=set(stats))
            if unit == "s":
                metric, unit = metric.removesuffix("_s") + "_ms", "ms"
                figures = {k: (v * 1000 if v is not None and k != "n" else v) for k, v in figures.items()}
            rows.append({"concurrency": level.concurrency, "metric": metric, "unit": unit or None} | figures)
    return rows


COLUMNS: dict[str, ColumnType] = {
    "concurrency": "int", "metric": "str", "unit": "str", "n": "int", "mean": "float", "p50": "float",
    "p90": "float", "p99": "float", "min": "float", "max": "float"}


# -- its request lines ------------------------------------------------------------------------------

class LatencyLine(RequestLineBase):
    kind: Literal["latency"]
    concurrency: int = 1
    index: int
    warmup: bool = False
    incomplete: bool = False  # the stream ended without a finish reason
    prompt_id: str | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    chunk_times_s: list[float] = Field(default_factory=list)

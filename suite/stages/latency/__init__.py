"""The latency stage: streamed requests, timed by the suite and, where it can, by the runtime.

After `warmup` requests that are not counted (its settings, `LatencySettings`), `requests` streamed completions of
one fixed prompt are sent at each of its concurrency levels (1 by default; a sweep such as
1,2,4 sends that many at once). Per level: time to first token (TTFT), inter-token latency (ITL,
the gaps between streamed token chunks), time per output token (TPOT, (e2e - TTFT) / (tokens - 1)),
end-to-end latency and output tokens/s, each as n, mean, p50, p90 and p99 (`suite.analysis.stats`).

Every request of the stage (warm-up included) starts with its own nonce, `Request 0007: `, of
the same form and token length for every request, before the fixed prompt: a repeated prompt
would be a prefix-cache hit after warm-up on llama.cpp and vLLM alike, and TTFT would measure a
cache lookup instead of prompt processing. The result records this as
`prompt_cache = "unique-prefix"`. The clock: TTFT at the first chunk that carries a generated
token (a role-only or usage-only chunk does not), e2e at the last such chunk, not at the stream's
close (`suite.client.is_token_choice`).

Concurrency: a level of 1 sends its requests in turn through the synchronous client. Above 1
(up to 256), `run_concurrent` runs every stream on one event loop in the stage's thread (uvloop's
where it is installed; `suite.client.AsyncOpenAIClient`: HTTP/1.1 on the loop's own transports,
each read timestamped as it arrives, then read by httptools and the same `StreamState` as the
synchronous path), with at least one request per stream in flight (`level_requests`), and writes
the records once the level ended.
Its own lag is watched (an event-loop probe, the process's CPU share); a level where it passed
the thresholds is recorded as `client.saturated`, and the page marks that level's figures as
the client's, not the runtime's. benchmarks/bench_client_concurrency.py measures the client's
error against a stand-in server with a known schedule, beside `vllm bench serve`'s.

The suite's own time per request is measured and reported beside them in ms: the client's time
outside the HTTP exchange (building the body, parsing the streamed chunks) and, apart, the
stage's time writing the request's record.

Runtime-reported timings are stored next to the suite's, where the runtime's definition says
where it reports them (`suite.definitions`): a `[timings]` table names the fields of the `timings`
object of each reply (llama-server's: prompt and generation time, and the prompt tokens taken
from its cache), which give paired differences per request (ours - runtime's); a `[metrics]` table
names per-request Prometheus histograms on `/metrics` (vLLM's `vllm:time_to_first_token_seconds`,
...), scraped before and after each level, whose deltas give the runtime's mean for exactly those
requests; n is the count of a per-request histogram (e2e, TTFT), and TPOT a per-request histogram,
not a per-token one. A runtime that declares neither gets no runtime timings.
Every request goes to `requests.jsonl` (kind `latency`); the summary holds numbers only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field

from suite.analysis.stats import Distribution, distribution_fields
from suite.errors import SuiteError
from suite.stages.base import ColumnType, ExportTable, SectionTemplate, Stage, StageOption
from suite.stages.lines import RequestLineBase

if TYPE_CHECKING:
    from suite.profiles import Profile

log = logging.getLogger(__name__)


RESULT_VERSION = 2  # 2: unique prompt prefix per request, token-chunk timing, per-request vLLM metrics (`client` per level: optional, added)
PROMPT_ID = "latency-story-v1"
# A plain completion prompt that makes any base or instruct model write on for a while.
PROMPT = (
    "The following is a long, detailed story about a lighthouse keeper on a remote island who finds "
    "an old map inside a glass bottle washed up on the shore.\n\nChapter 1\n\n"
)

# The nonce before the prompt: one per request of the stage, the same length (and token length:
# four zero-padded digits) for every request. 10,000 requests per stage at most.
PROMPT_PREFIX = "Request {index:04d}: "
PROMPT_CACHE: Literal["unique-prefix"] = "unique-prefix"
MAX_REQUESTS = 10_000
MAX_CONCURRENCY = 256


class LatencySettings(BaseModel):
    """The stage's settings: its defaults here, a profile's own values in `STAGE.profiles`, a run's
    levels from `--concurrency`."""

    model_config = ConfigDict(extra="forbid")

    requests: int = Field(default=10, ge=1)  # measured requests per concurrency level (x the level)
    warmup: int = Field(default=2, ge=0)  # requests before them, not counted
    max_tokens: int = Field(default=64, ge=1)
    concurrency: list[Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)]] = Field(default_factory=lambda: [1], min_length=1)


def settings(profile: Profile) -> LatencySettings:
    """This stage's settings for a profile (its values, then the run's own)."""
    return cast(LatencySettings, STAGE.settings_for(profile))

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


def prompt_for(index: int) -> str:
    """The prompt of the stage's `index`-th request: its nonce, then the fixed prompt."""
    if not 0 <= index < MAX_REQUESTS:
        raise SuiteError(f"latency: request {index} is past the {MAX_REQUESTS} unique prompt prefixes")
    return PROMPT_PREFIX.format(index=index) + PROMPT


# The quantities whose observation count is the number of requests, in order of preference.
REQUEST_COUNT = ("e2e", "ttft", "tpot")
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


# -- helpers --------------------------------------------------------------------------------------


# -- the stage ------------------------------------------------------------------------------------


def level_requests(requests: int, concurrency: int) -> int:
    """Measured requests of a level: the profile's count, and at least one per stream in flight."""
    return max(requests, concurrency)


def planned(profile: Profile) -> int:
    """Its requests for a profile: the warm-up, then each level's."""
    own = settings(profile)
    return own.warmup + sum(level_requests(own.requests, c) for c in own.concurrency)


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


# the stage's run (run.py reads this package's models and settings, so it comes after them)
from suite.stages.latency.run import (  # noqa: E402, F401 - re-exported
    ConcurrentRun,
    _n_tokens,
    _one_request,
    _runtime_timings,
    _tpot,
    histogram_means,
    parse_prometheus,
    reported_timings,
    run,
    run_concurrent,
    run_level,
    scrape_metrics,
)

STAGE = Stage(name="latency", result=LatencyResult, run=run, lines=(LatencyLine,), fresh_runtimes=False, in_bench=True,
              summary="streamed requests timed by the suite and the runtime, at each concurrency level",
              planned=planned, settings=LatencySettings,
              options=(StageOption("--concurrency", "concurrency", "Latency concurrency sweep, e.g. 1,2,4 "
                                   "(default: the profile's).", kind="ints"),
                       StageOption("--latency-max-tokens", "max_tokens", "The latency stage's answer cap "
                                   "(default: the profile's).", kind="int", min=1)),
              profiles={"quick": {"requests": 4, "warmup": 1, "max_tokens": 32},
                        "full": {"requests": 50, "warmup": 3, "max_tokens": 256, "concurrency": [1, 2, 4]}},
              profile_keys={"latency_requests": "requests", "latency_warmup": "warmup", "latency_max_tokens": "max_tokens",
                            "concurrency": "concurrency"},
              tables=(ExportTable("latency", export_rows, COLUMNS),), exported_requests=("latency",),
              page_title="latency",
              section=SectionTemplate("section.html", "suite.stages.latency.view:page", slot="measures", order=0))

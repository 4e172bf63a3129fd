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

The package in two halves: the record half, imported here (`result`: its records and export;
`settings`: its settings, options and planned requests; `view`: its page section), and the run
half, `run`, which sends and times the requests and is named by `STAGE` as
"suite.stages.latency.run:run", imported only when a bench runs the stage.
"""

from __future__ import annotations

from suite.stages.base import ExportTable, SectionTemplate, Stage
from suite.stages.latency.result import COLUMNS, ClientLoad, LatencyLevel, LatencyLine, LatencyResult, RuntimeTimings, export_rows
from suite.stages.latency.settings import OPTIONS, PROFILE_KEYS, PROFILES, LatencySettings, level_requests, planned, settings

# The names other code imports from the package (each defined in the module that imports it here).
# The run half (`run`, `run_level`, `run_concurrent`, `prompt_for`, the runtime's timings and
# /metrics read as requests are sent) is `suite.stages.latency.run`'s, imported from there.
__all__ = ["COLUMNS", "STAGE", "ClientLoad", "LatencyLevel", "LatencyLine", "LatencyResult", "LatencySettings", "RuntimeTimings", "export_rows",
           "level_requests", "planned", "settings"]

STAGE = Stage(name="latency", result=LatencyResult, run="suite.stages.latency.run:run", lines=(LatencyLine,), fresh_runtimes=False, in_bench=True,
              summary="streamed requests timed by the suite and the runtime, at each concurrency level",
              planned=planned, settings=LatencySettings, options=OPTIONS, profiles=PROFILES, profile_keys=PROFILE_KEYS,
              tables=(ExportTable("latency", export_rows, COLUMNS),), exported_requests=("latency",),
              page_title="latency",
              section=SectionTemplate("section.html", "suite.stages.latency.view:page", slot="measures", order=0))

"""The latency stage's run: streamed requests after a warm-up, one level of concurrency after
another, timed per token chunk, with the runtime's own timings and /metrics beside ours where its
definition declares them; each request's prompt starts with its own nonce (`prompt_for`). Its
records and export are `suite.stages.latency.result`'s, its settings `suite.stages.latency.settings`';
the run half of the package: its `STAGE` names `run` here as "suite.stages.latency.run:run",
imported only when a bench runs the stage."""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import resource
import time
from itertools import pairwise
from typing import TYPE_CHECKING, Any, Literal

import httpx
from pydantic import BaseModel

from suite.analysis.stats import summarize
from suite.client import AsyncOpenAIClient, ClientError, Completion, OpenAIClient, event_loop_factory
from suite.definitions import MetricsSpec, TimingsSpec
from suite.errors import SuiteError
from suite.stages.latency.result import (
    LAG_PROBE_S,
    METRICS_SOURCE,
    SATURATION_CPU_SHARE,
    SATURATION_LAG_FLOOR_S,
    SATURATION_LAG_SHARE,
    TIMINGS_SOURCE,
    ClientLoad,
    LatencyLevel,
    LatencyResult,
    RuntimeTimings,
)
from suite.stages.latency.settings import MAX_CONCURRENCY, LatencySettings, level_requests, planned, settings

if TYPE_CHECKING:
    from suite.stages.base import StageContext

log = logging.getLogger(__name__)

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


def prompt_for(index: int) -> str:
    """The prompt of the stage's `index`-th request: its nonce, then the fixed prompt."""
    if not 0 <= index < MAX_REQUESTS:
        raise SuiteError(f"latency: request {index} is past the {MAX_REQUESTS} unique prompt prefixes")
    return PROMPT_PREFIX.format(index=index) + PROMPT


# The quantities whose observation count is the number of requests, in order of preference.
REQUEST_COUNT = ("e2e", "ttft", "tpot")


def _n_tokens(c: Completion) -> int:
    """Tokens generated (the suite's one rule, `Completion.n_tokens`); 0 when nothing says."""
    return c.n_tokens or 0


def _tpot(c: Completion, n: int) -> float | None:
    if c.ttft_s is None or n < 2:
        return None
    return (c.e2e_s - c.ttft_s) / (n - 1)


def reported_timings(t: dict[str, Any] | None, spec: TimingsSpec) -> dict[str, float] | None:
    """(ttft, tpot, e2e) in seconds from a reply's `timings` object, read by the definition's
    `[timings]` field names; None where it declares none or the reply lacks them."""
    if not t or spec.prompt_ms is None or spec.generation_ms is None:
        return None
    prompt_ms, generation_ms = t.get(spec.prompt_ms), t.get(spec.generation_ms)
    if not isinstance(prompt_ms, (int, float)) or not isinstance(generation_ms, (int, float)):
        return None
    generated = (t.get(spec.generated_tokens) if spec.generated_tokens is not None else None) or 0
    out = {"ttft": float(prompt_ms) / 1000.0, "e2e": (float(prompt_ms) + float(generation_ms)) / 1000.0}
    # The generation time spans the tokens decoded after the prompt: the first token is sampled
    # from the prompt pass, so the per-token gap is generation_ms / (generated - 1) when that is > 0.
    if generated >= 2:
        out["tpot"] = float(generation_ms) / 1000.0 / (generated - 1)
    return out


def parse_prometheus(text: str) -> dict[str, float]:
    """Sum of every sample per sample name (labels summed away): enough for histogram deltas.

    Parsed by prometheus_client's text parser; NaN samples are dropped, and a malformed line
    ends the parse with what was read before it (logged).
    """
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                value = float(sample.value)
                if math.isnan(value):
                    continue
                out[sample.name] = out.get(sample.name, 0.0) + value
    except (ValueError, TypeError, IndexError) as exc:
        log.warning("/metrics: unparseable exposition text, kept the %d samples before it: %s", len(out), exc)
    return out


def scrape_metrics(base_url: str, spec: MetricsSpec) -> dict[str, float] | None:
    """The runtime's Prometheus metrics, or None where it serves none of the definition's
    `[metrics]` histograms (or declares none: then nothing is asked)."""
    if not spec.declared:
        return None
    try:
        r = httpx.get(f"{base_url.rstrip('/')}/metrics", timeout=10.0)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    metrics = parse_prometheus(r.text)
    known = [name for names in spec.by_quantity().values() for name in names]
    return metrics if any(f"{name}_count" in metrics or f"{name}_sum" in metrics for name in known) else None


def histogram_means(before: dict[str, float], after: dict[str, float],
                    spec: MetricsSpec) -> dict[str, tuple[float, int]]:
    """Per quantity, (mean seconds, count) of the observations added between two scrapes."""
    out: dict[str, tuple[float, int]] = {}
    for quantity, names in spec.by_quantity().items():
        for name in names:
            s_key, c_key = f"{name}_sum", f"{name}_count"
            if s_key in after and c_key in after:
                d_count = after[c_key] - before.get(c_key, 0.0)
                d_sum = after[s_key] - before.get(s_key, 0.0)
                if d_count > 0:
                    out[quantity] = (d_sum / d_count, int(round(d_count)))
                    break
    return out


def request_count(means: dict[str, tuple[float, int]]) -> int:
    """Requests behind the histograms' figures: the observation count of a per-request histogram."""
    for quantity in REQUEST_COUNT:
        if quantity in means:
            return means[quantity][1]
    return 0


def _diff_ms(ours: float | None, theirs: float | None) -> float | None:
    return None if ours is None or theirs is None else (ours - theirs) * 1000.0


class _Sample(BaseModel):
    ttft: float | None
    e2e: float
    tpot: float | None
    n_tokens: int
    itl: list[float]
    overhead_s: float
    record_s: float = 0.0
    runtime: dict[str, float] | None
    stream_close: float | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None


def _one_request(client: OpenAIClient, *, index: int, max_tokens: int) -> Completion:
    return client.complete(prompt_for(index), max_tokens=max_tokens, stream=True)


def _cached_tokens(c: Completion, spec: TimingsSpec) -> int | None:
    """Prompt tokens the runtime reused from its cache (its `timings` field `[timings] cached_tokens`
    names: llama-server's `cache_n`), if it says."""
    if spec.cached_tokens is None:
        return None
    v = (c.server_timings or {}).get(spec.cached_tokens)
    return int(v) if isinstance(v, (int, float)) else None


class ConcurrentRun(BaseModel):
    """The outcome of `run_concurrent`: per request (in index order) a completion or an error."""

    model_config = {"arbitrary_types_allowed": True}

    results: list[Completion | str]  # str: the ClientError's message
    wall_s: float
    cpu_s: float  # the process's CPU time (user + system, every thread) over the run
    loop_lag_s: list[float]

    def client_load(self, itl_p50_s: float | None) -> ClientLoad:
        """The run's load, and whether it passed the saturation thresholds (see LAG_PROBE_S)."""
        lag = summarize([x * 1000.0 for x in self.loop_lag_s])
        threshold_s = max(SATURATION_LAG_FLOOR_S, SATURATION_LAG_SHARE * (itl_p50_s or 0.0))
        parse = sum(c.parse_s for c in self.results if isinstance(c, Completion))
        cpu_share = self.cpu_s / self.wall_s if self.wall_s > 0 else None
        reasons = []
        if lag.p99 is not None and lag.p99 > threshold_s * 1000.0:
            reasons.append(f"event-loop lag p99 {lag.p99:.2f} ms > {threshold_s * 1000.0:.2f} ms")
        if cpu_share is not None and cpu_share > SATURATION_CPU_SHARE:
            reasons.append(f"client CPU {cpu_share:.0%} of a core > {SATURATION_CPU_SHARE:.0%}")
        return ClientLoad(loop_lag_ms=lag, cpu_share=None if cpu_share is None else round(cpu_share, 4),
                          parse_share=round(parse / self.wall_s, 4) if self.wall_s > 0 else None,
                          lag_threshold_ms=round(threshold_s * 1000.0, 4), saturated=bool(reasons),
                          reason="; ".join(reasons) or None)


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def _run_concurrent(client: OpenAIClient, n: int, concurrency: int, prompt: Any, max_tokens: int,
                          backend: type[AsyncOpenAIClient]) -> ConcurrentRun:
    results: list[Completion | str] = [""] * n
    lags: list[float] = []
    next_index = 0
    loop = asyncio.get_running_loop()
    clock = time.perf_counter  # not loop.time(): uvloop's counts whole milliseconds
    probe: asyncio.TimerHandle | None = None

    def tick(due: float) -> None:  # the lag probe: a plain timer callback, cheaper than a task that sleeps
        nonlocal probe
        now = clock()
        lags.append(max(0.0, now - due))
        probe = loop.call_later(LAG_PROBE_S, tick, now + LAG_PROBE_S)

    async def worker(aclient: AsyncOpenAIClient) -> None:
        nonlocal next_index
        while next_index < n:  # one event loop: no lock needed between the check and the claim
            i = next_index
            next_index += 1
            try:
                results[i] = await aclient.complete_stream(prompt(i), max_tokens=max_tokens)
            except ClientError as exc:
                results[i] = str(exc)

    async with client.async_client(max_connections=concurrency, backend=backend) as aclient:
        probe = loop.call_later(LAG_PROBE_S, tick, clock() + LAG_PROBE_S)
        cpu0, t0 = _cpu_s(), time.perf_counter()
        await asyncio.gather(*(worker(aclient) for _ in range(min(concurrency, n))))
        wall, cpu = time.perf_counter() - t0, _cpu_s() - cpu0
        probe.cancel()
    return ConcurrentRun(results=results, wall_s=wall, cpu_s=cpu, loop_lag_s=lags)


def run_concurrent(client: OpenAIClient, n: int, concurrency: int, prompt: Any, *, max_tokens: int,
                   backend: type[AsyncOpenAIClient] = AsyncOpenAIClient) -> ConcurrentRun:
    """`n` streamed completions, `concurrency` in flight, on one event loop in this thread (with
    the client's params).

    `backend`: the `AsyncOpenAIClient` class, that is the transport (the suite's own by default;
    benchmarks/client_transports.py holds the others the benchmarks compare).

    `prompt(i)` gives request i's prompt. Nothing is written while the streams run (a record
    written on the loop would delay every other stream's timestamps): the caller books them after.
    """
    # The cyclic garbage collector is held off while the streams run: a full collection over a
    # few hundred live streams stopped the loop for ~15 ms (measured), a stall every stream's
    # timestamps would carry. Reference counting still frees nearly everything; the cycles left
    # (bounded by the level's requests) are collected when the level ends.
    gc.collect()
    gc.freeze()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            return runner.run(_run_concurrent(client, n, concurrency, prompt, max_tokens, backend))
    finally:
        if was_enabled:
            gc.enable()
        gc.unfreeze()
        gc.collect()


def run_level(ctx: StageContext, concurrency: int, requests: int, max_tokens: int,
              first_index: int = 0) -> LatencyLevel:
    """`requests` streamed requests with `concurrency` in flight; summary of the measured ones.

    Request i of the level gets the prompt prefix `first_index + i`, so no two requests of the
    stage share a prompt. One at a time, the synchronous client sends them in turn; above that,
    `run_concurrent` sends them on one event loop and the records are written once all ended.
    """
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise SuiteError(f"latency: concurrency must be 1 to {MAX_CONCURRENCY}, got {concurrency}")
    seed = ctx.client.params.seed
    timings, metrics = ctx.runtime.timings, ctx.runtime.metrics  # where the runtime reports its own
    samples: list[_Sample] = []
    errors: list[str] = []
    incomplete: list[int] = []

    def book(index: int, c: Completion | str) -> None:
        prompt_index = first_index + index
        if isinstance(c, str):
            errors.append(c)
            ctx.record_request("latency", concurrency=concurrency, index=index, warmup=False,
                               prompt_index=prompt_index, error=c)
            return
        t_book = time.perf_counter()
        n = _n_tokens(c)
        if c.finish_reason is None:
            # The stream stopped without saying why: llama-cpp-python, for one, interrupts a
            # running request when another arrives. Recorded, but kept out of the figures.
            incomplete.append(index)
            ctx.record_request("latency", concurrency=concurrency, index=index, warmup=False, incomplete=True,
                               prompt_index=prompt_index, text=c.text, completion_tokens=n, ttft_s=c.ttft_s,
                               e2e_s=c.e2e_s, stream_close_s=c.stream_close_s)
            return
        times = c.chunk_times_s
        itl = [b - a for a, b in pairwise(times)]
        runtime = reported_timings(c.server_timings, timings)
        sample = _Sample(ttft=c.ttft_s, e2e=c.e2e_s, tpot=_tpot(c, n), n_tokens=n, itl=itl,
                         overhead_s=c.overhead_s, runtime=runtime, stream_close=c.stream_close_s,
                         prompt_tokens=c.prompt_tokens, cached_tokens=_cached_tokens(c, timings))
        ctx.record_request(
            "latency", concurrency=concurrency, index=index, warmup=False, prompt_id=PROMPT_ID,
            prompt_index=prompt_index, prompt_prefix=PROMPT_PREFIX.format(index=prompt_index), seed=seed,
            max_tokens=max_tokens, text=c.text, finish_reason=c.finish_reason, completion_tokens=n,
            prompt_tokens=c.prompt_tokens, ttft_s=c.ttft_s, e2e_s=c.e2e_s, stream_close_s=c.stream_close_s,
            tpot_s=sample.tpot, chunk_times_s=[round(x, 6) for x in times], client_overhead_s=c.overhead_s,
            server_timings=c.server_timings,
        )
        sample.record_s = time.perf_counter() - t_book
        samples.append(sample)

    metrics_before = scrape_metrics(ctx.base_url, metrics)
    concurrent: ConcurrentRun | None = None
    if concurrency <= 1:
        t0 = time.perf_counter()
        for i in range(requests):
            try:
                c: Completion | str = _one_request(ctx.client, index=first_index + i, max_tokens=max_tokens)
            except ClientError as exc:
                c = str(exc)
            book(i, c)
        wall = time.perf_counter() - t0
    else:
        concurrent = run_concurrent(ctx.client, requests, concurrency, lambda i: prompt_for(first_index + i),
                                    max_tokens=max_tokens)
        wall = concurrent.wall_s
        for i, c in enumerate(concurrent.results):
            book(i, c)
    metrics_after = scrape_metrics(ctx.base_url, metrics) if metrics_before is not None else None

    if not samples:
        why = errors[0] if errors else f"{len(incomplete)} streams ended without a finish reason"
        raise SuiteError(f"latency: no request at concurrency {concurrency} completed: {why}")
    ttfts = [s.ttft for s in samples if s.ttft is not None]
    tpots = [s.tpot for s in samples if s.tpot is not None]
    e2es = [s.e2e for s in samples]
    total_tokens = sum(s.n_tokens for s in samples)
    prompt_lengths = sorted({s.prompt_tokens for s in samples if s.prompt_tokens is not None})
    if len(prompt_lengths) > 1:
        log.warning("latency c=%d: the prompt prefix gave %d prompt lengths (%s tokens); TTFTs compare "
                    "prompts of different lengths", concurrency, len(prompt_lengths),
                    ", ".join(map(str, prompt_lengths)))
    level = LatencyLevel(
        concurrency=concurrency,
        requests=requests,
        failed=len(errors),
        incomplete=len(incomplete),
        wall_s=round(wall, 4),
        first_index=first_index,
        stream_close_s=summarize([s.stream_close for s in samples if s.stream_close is not None]),
        prompt_tokens=summarize([s.prompt_tokens for s in samples if s.prompt_tokens is not None]),
        prompt_cached_tokens=(summarize([s.cached_tokens for s in samples if s.cached_tokens is not None])
                              if any(s.cached_tokens is not None for s in samples) else None),
        ttft_s=summarize(ttfts),
        itl_s=summarize([x for s in samples for x in s.itl]),
        tpot_s=summarize(tpots),
        e2e_s=summarize(e2es),
        output_tokens=summarize([s.n_tokens for s in samples]),
        output_tokens_per_s=summarize([s.n_tokens / s.e2e for s in samples if s.e2e > 0]),
        throughput_tokens_per_s=total_tokens / wall if wall > 0 else None,
        overhead_ms=summarize([s.overhead_s * 1000.0 for s in samples]),
        record_ms=summarize([s.record_s * 1000.0 for s in samples]),
    )
    level.runtime_timings = _runtime_timings(samples, level, metrics_before, metrics_after, metrics)
    if concurrent is not None:
        level.client = concurrent.client_load(level.itl_s.p50)
        if level.client.saturated:
            log.warning("latency c=%d: the client was saturated (%s): these figures describe the client, "
                        "not the runtime", concurrency, level.client.reason)
    return level


def _runtime_timings(samples: list[_Sample], level: LatencyLevel, before: dict[str, float] | None,
                     after: dict[str, float] | None, metrics: MetricsSpec) -> RuntimeTimings | None:
    """The runtime's own figures for the level: per request from its replies' `timings` (paired
    with ours), else from its /metrics histograms' deltas; None where it gave neither."""
    paired = [s for s in samples if s.runtime]
    if paired:
        rt_ttft = [s.runtime["ttft"] for s in paired if s.runtime and "ttft" in s.runtime]
        rt_tpot = [s.runtime["tpot"] for s in paired if s.runtime and "tpot" in s.runtime]
        rt_e2e = [s.runtime["e2e"] for s in paired if s.runtime and "e2e" in s.runtime]
        d_ttft = [(s.ttft - s.runtime["ttft"]) * 1000.0 for s in paired
                  if s.runtime and s.ttft is not None and "ttft" in s.runtime]
        d_tpot = [(s.tpot - s.runtime["tpot"]) * 1000.0 for s in paired
                  if s.runtime and s.tpot is not None and "tpot" in s.runtime]
        out = RuntimeTimings(
            source=TIMINGS_SOURCE, n=len(paired),
            ttft_mean_s=summarize(rt_ttft).mean, tpot_mean_s=summarize(rt_tpot).mean, e2e_mean_s=summarize(rt_e2e).mean,
            ttft_diff_ms=summarize(d_ttft), tpot_diff_ms=summarize(d_tpot),
        )
    elif before is not None and after is not None:
        means = histogram_means(before, after, metrics)
        if not means:
            return None
        out = RuntimeTimings(
            source=METRICS_SOURCE, n=request_count(means),
            ttft_mean_s=means.get("ttft", (None, 0))[0], tpot_mean_s=means.get("tpot", (None, 0))[0],
            e2e_mean_s=means.get("e2e", (None, 0))[0],
            n_ttft=means["ttft"][1] if "ttft" in means else None,
            n_tpot=means["tpot"][1] if "tpot" in means else None,
            n_e2e=means["e2e"][1] if "e2e" in means else None,
        )
    else:
        return None
    out.ttft_mean_diff_ms = _diff_ms(level.ttft_s.mean, out.ttft_mean_s)
    out.tpot_mean_diff_ms = _diff_ms(level.tpot_s.mean, out.tpot_mean_s)
    out.e2e_mean_diff_ms = _diff_ms(level.e2e_s.mean, out.e2e_mean_s)
    return out


def run(ctx: StageContext) -> LatencyResult:
    """Warm up, then measure every concurrency level of the profile."""
    profile, own = ctx.profile, ctx.own(LatencySettings) or settings(ctx.profile)
    max_tokens = own.max_tokens
    total = planned(profile)
    if total > MAX_REQUESTS:
        raise SuiteError(f"profile {profile.name}: {total} latency requests, more than the {MAX_REQUESTS} "
                         "unique prompt prefixes")
    for i in range(own.warmup):  # warm-up requests take prefixes 0 .. warmup-1
        try:
            c = _one_request(ctx.client, index=i, max_tokens=max_tokens)
            ctx.record_request("latency", concurrency=1, index=i, warmup=True, prompt_id=PROMPT_ID,
                               prompt_index=i, text=c.text, finish_reason=c.finish_reason, ttft_s=c.ttft_s,
                               e2e_s=c.e2e_s, completion_tokens=_n_tokens(c), server_timings=c.server_timings)
        except ClientError as exc:
            ctx.record_request("latency", concurrency=1, index=i, warmup=True, prompt_index=i, error=str(exc))
            log.warning("latency warm-up request %d failed: %s", i, exc)
    levels = []
    next_index = own.warmup
    for concurrency in own.concurrency:
        if not 1 <= concurrency <= MAX_CONCURRENCY:
            raise SuiteError(f"profile {profile.name}: concurrency must be 1 to {MAX_CONCURRENCY}, got {concurrency}")
        n = level_requests(own.requests, concurrency)
        level = run_level(ctx, concurrency, n, max_tokens, first_index=next_index)
        next_index += n
        log.info("latency c=%d: TTFT p50 %.1f ms, TPOT p50 %.1f ms, overhead p50 %.3f ms%s", concurrency,
                 (level.ttft_s.p50 or 0) * 1000, (level.tpot_s.p50 or 0) * 1000, level.overhead_ms.p50 or 0,
                 " (client saturated)" if level.saturated else "")
        levels.append(level)
    return LatencyResult(prompt_id=PROMPT_ID, endpoint="/v1/completions", max_tokens=max_tokens,
                         warmup=own.warmup, levels=levels, signature_digest=ctx.signature.digest,
                         prompt_cache=PROMPT_CACHE, prompt_prefix=PROMPT_PREFIX)

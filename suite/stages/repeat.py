"""The repeated-request engine: the same request N times per prompt, recorded as it goes, and what
came back analysed into a `GateResult`. The gate stage runs it on the arm's runtime; the control
matrix, the restarts and the sessions run it on the launches they make.

For each prompt (`prompts/gate/*.toml`, versioned and hashed), N identical requests at the card's
fixed seed and sampling settings, one at a time (or `concurrency` at once, the same request from
several clients, when the active control says so). Every request is recorded in `requests.jsonl`
as it finishes (text, token ids, logprobs where the runtime gives them cheaply, finish reason,
timings), so nothing measured is lost if the runtime dies. The analysis (`suite.analysis.repro`)
gives per prompt the distinct answers, the modal share, the lengths with their counts, where each
other answer departs from the modal one, and cold against warm.

A runtime error or an empty answer is recorded per request and the series goes on; a runtime that
dies (or fails `MAX_CONSECUTIVE_ERRORS` requests in a row) stops it with a clear reason, keeping
what was measured. A prompt the runtime refuses that many times in a row (HTTP 4xx: longer than
its context, say) ends that prompt's series with the reason, and the next prompt runs. A request
field can select a LoRA adapter.

The prompts and the result's records (`GatePrompt`, `GateResult`, `verdict_of`, ...) are
`suite.stages.gate_models`'s: reading a record needs none of this module.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.analysis.repro import Sample, analyse, group_answers
from suite.client import ClientError, Completion, OpenAIClient

# The gate's records live in `suite.stages.gate_models` (read without this engine); they are named
# here too, for code that imported them from the engine. The prompts' folder is not: it is read
# where it is defined (`gate_models.GATE_DIR`), and a second name for it here would be one that
# setting changes nothing.
from suite.stages.gate_models import (
    GatePrompt,
    GatePromptResult,
    GateResult,
    load_gate_prompt,
    load_gate_prompts,
    samples_of,
    select_prompts,
    truncation_by_prompt,
    truncation_note,
    verdict_of,
)

if TYPE_CHECKING:
    from suite.stages.base import StageContext

__all__ = ["MAX_CONSECUTIVE_ERRORS", "TOP_LOGPROBS", "GatePrompt", "GatePromptResult", "GateResult", "RecordFn",
           "concurrency_of", "death_reason_of", "died_text", "load_gate_prompt", "load_gate_prompts", "logprobs_for", "refused",
           "run_gate", "samples_of", "select_prompts", "truncation_by_prompt", "truncation_note", "verdict_of"]

log = logging.getLogger(__name__)


MAX_CONSECUTIVE_ERRORS = 5
TOP_LOGPROBS = 2  # top-1 and top-2: the margin at a divergence says how close the runtime was to a tie


# -- running --------------------------------------------------------------------------------------

RecordFn = Callable[..., None]


def _sample(index: int, c: Completion) -> Sample:
    return Sample(index=index, text=c.text, token_ids=c.token_ids, logprobs=c.logprobs,
                  top_logprobs=c.top_logprobs, completion_tokens=c.completion_tokens,
                  finish_reason=c.finish_reason, error=c.error)


def _one_request(client: OpenAIClient, prompt: GatePrompt, max_tokens: int, logprobs: bool,
                 extra: dict[str, Any]) -> Completion:
    try:
        if prompt.kind == "chat":
            return client.chat([{"role": "user", "content": prompt.prompt}], max_tokens=max_tokens,
                               logprobs=TOP_LOGPROBS if logprobs else None, extra=extra or None)
        return client.complete(prompt.prompt, max_tokens=max_tokens, logprobs=TOP_LOGPROBS if logprobs else None,
                               extra=extra or None)
    except ClientError as exc:
        return Completion(error=str(exc), error_status=exc.status)


def refused(c: Completion) -> bool:
    """The runtime answered this request with a client error (HTTP 4xx: a prompt longer than its
    context, a field it rejects): it is up and refusing this request, not failing."""
    return c.error_status is not None and 400 <= c.error_status < 500


def run_gate(client: OpenAIClient, prompts: list[GatePrompt], n: int, *, max_tokens_cap: int | None = None, logprobs: bool = False, concurrency: int = 1,
             extra: dict[str, Any] | None = None, record: RecordFn | None = None,
             alive: Callable[[], bool] | None = None, death_reason: Callable[[], str | None] | None = None,
             label: str = "default", controls: list[str] | None = None, kind: str = "gate",
             process_cold: bool = True, stop_after_distinct: int | None = None) -> GateResult:
    """N identical requests per prompt; analyse them; return the gate's result.

    `process_cold`: the runtime has served no request since it started, so the first request of
    the first prompt is cold in every cache; the first request of each later prompt is cold only
    for that prompt.

    The requests carry the client's params (seed, sampling, the controls' fields) and `extra`, this
    series' own fields (a LoRA adapter's selection). `record(kind, **fields)` is called once per
    request as soon as it finishes. `alive()` says
    whether the runtime still runs (checked after a failed request); `death_reason()` gives the
    log line that says why it died. `stop_after_distinct`: a prompt's series ends as soon as it has
    shown that many distinct answers (a control row that shows a second answer cannot be credited).
    """
    extra = dict(extra or {})
    params = client.params
    request_extra = params.request_extra | extra  # what every request carried besides the prompt
    seed, temperature = params.seed, params.temperature
    concurrency = max(1, concurrency)
    t_gate = time.perf_counter()
    http_s = 0.0
    results: list[GatePromptResult] = []
    stopped: str | None = None
    pool = ThreadPoolExecutor(max_workers=concurrency) if concurrency > 1 else None
    try:
        for prompt in prompts:
            if stopped:
                break
            max_tokens = min(prompt.max_tokens, max_tokens_cap) if max_tokens_cap else prompt.max_tokens
            samples: list[Sample] = []
            errors: list[str] = []
            lengths: set[int] = set()  # the prompt's token counts the runtime reported
            consecutive = refusals = 0  # failed requests in a row; of them, refused ones in a row
            prompt_stopped: str | None = None
            for wave_start in range(0, n, concurrency):
                indices = list(range(wave_start, min(n, wave_start + concurrency)))
                # used up within this iteration (the map is read at once), so the loop's names are current
                call = lambda _i: _one_request(client, prompt, max_tokens, logprobs, extra)  # noqa: E731, B023
                outs = list(pool.map(call, indices)) if pool else [call(indices[0])]
                for i, c in zip(indices, outs, strict=True):
                    http_s += c.e2e_s
                    samples.append(_sample(i, c))
                    if record is not None:
                        record(kind, label=label, controls=controls or [], prompt_id=prompt.id,
                               prompt_version=prompt.version, prompt_sha256=prompt.sha256, index=i,
                               wave=wave_start // concurrency, concurrency=concurrency, seed=seed,
                               temperature=temperature, max_tokens=max_tokens, request_extra=request_extra,
                               text=c.text, token_ids=c.token_ids, logprobs=c.logprobs,
                               top_logprobs=c.top_logprobs, finish_reason=c.finish_reason, prompt_tokens=c.prompt_tokens,
                               completion_tokens=c.completion_tokens, e2e_s=c.e2e_s, ttft_s=c.ttft_s,
                               overhead_s=c.overhead_s, server_timings=c.server_timings,
                               system_fingerprint=c.system_fingerprint, error=c.error)
                    if c.error:
                        consecutive += 1
                        refusals = refusals + 1 if refused(c) else 0
                        if c.error not in errors:
                            errors.append(c.error)
                        log.warning("%s %s request %d failed: %s", label, prompt.id, i, c.error)
                    else:
                        consecutive = refusals = 0
                        if c.prompt_tokens is not None:
                            lengths.add(c.prompt_tokens)
                if any(c.error for c in outs):
                    if alive is not None and not alive():
                        why = death_reason() if death_reason else None
                        answered = sum(1 for x in samples if not x.error)
                        stopped = prompt_stopped = died_text(why, f"during {prompt.id} after {answered} of {n} requests")
                    elif refusals >= MAX_CONSECUTIVE_ERRORS:
                        # the runtime is up and refuses this prompt: the other prompts still run
                        prompt_stopped = (f"the runtime refused {refusals} requests in a row of {prompt.id} "
                                          f"(HTTP {c.error_status}); last error: {errors[-1]}")
                    elif consecutive >= MAX_CONSECUTIVE_ERRORS:
                        stopped = prompt_stopped = (f"{consecutive} requests in a row failed on {prompt.id}; "
                                                    f"last error: {errors[-1]}")
                if stopped:
                    log.error("gate stopped: %s", stopped)
                    break
                if prompt_stopped:
                    log.error("gate: %s; the next prompt goes on", prompt_stopped)
                    break
                if stop_after_distinct is not None and len(group_answers(samples)) >= stop_after_distinct:
                    break
            a = analyse(samples, cold_count=concurrency, process_cold=process_cold and not results)
            results.append(GatePromptResult.from_analysis(
                a, prompt_id=prompt.id, prompt_version=prompt.version, prompt_sha256=prompt.sha256,
                kind=prompt.kind, max_tokens=max_tokens, error_messages=errors[:5], stopped_reason=prompt_stopped,
                prompt_tokens=sorted(lengths)))
            log.info("%s %s: %d distinct in %d (lengths %s)", label, prompt.id, a.distinct_answers, a.answered, a.lengths_text)
    finally:
        if pool:
            pool.shutdown(wait=True)
    reproducible, verdict = verdict_of(results, stopped, needed=n if stop_after_distinct is None else None)
    wall = time.perf_counter() - t_gate
    total = sum(p.requests for p in results)
    overhead = (wall - http_s) / total * 1000 if total and concurrency == 1 else None
    return GateResult(label=label, controls=controls or [], model=extra.get("model") or client.model,
                      n_requests=n, concurrency=concurrency, request_extra=request_extra, seed=seed,
                      temperature=temperature,
                      logprobs=logprobs, prompts=results, reproducible=reproducible, verdict=verdict,
                      stopped_reason=stopped, wall_s=round(wall, 4), http_s=round(http_s, 4),
                      overhead_ms_per_request=None if overhead is None or math.isnan(overhead) else round(overhead, 4))


def death_reason_of(running: Any) -> Callable[[], str | None]:
    """How a runtime that died ended, read when it has: "crashed: SIGSEGV (segmentation fault)",
    then, after "; ", its log's error line where one reads as an error ("; its log: ...")."""
    def reason() -> str | None:
        from suite.launchers.base import find_error_line

        path = getattr(running, "log_path", None)
        try:
            text = Path(path).read_text(errors="replace") if path else ""
        except OSError:
            text = ""
        ended = running.ended() if callable(getattr(running, "ended", None)) else None
        line = find_error_line(text)
        if ended is None:
            return f"its log: {line}" if line else None
        return f"{ended}; its log: {line}" if line else f"{ended}; no error line in its log"
    return reason


def died_text(why: str | None, where: str) -> str:
    """"the runtime crashed: SIGSEGV (segmentation fault) during X; its log: ..." from a death
    reason (`death_reason_of`) and where it happened ("during X after 3 of 20 requests")."""
    if not why:
        return f"the runtime died {where}: no error line in its log"
    head, sep, tail = why.partition("; ")
    if head.startswith("its log:"):
        return f"the runtime died {where}; {why}"
    return f"the runtime {head} {where}" + (f"; {tail}" if sep else "")


def logprobs_for(ctx: StageContext) -> bool:
    return ctx.runtime.capabilities.logprobs == "cheap"


def concurrency_of(ctx: StageContext, controls: list[str]) -> int:
    return max([ctx.runtime.control(c).concurrency for c in controls] or [1])

"""The batch-composition stage's run: the target prompt alone, then among other prompts sent at once,
then among prompts that share a prefix with it, the prefix cache emptied between trials where the
runtime offers a way. Its records and verdict are `suite.stages.batch.result`'s, its settings
`suite.stages.batch.settings`', its trials' prompts and the comparison with the reference
`suite.stages.batch.trials`'. The run half of the package: its `STAGE` names `run` here as
"suite.stages.batch.run:run", imported only when a bench runs the stage."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from suite.analysis.repro import Sample, analyse
from suite.client import ClientError, Completion, OpenAIClient, event_loop_factory
from suite.errors import SuiteError
from suite.stages.batch.result import MODES, BatchMode, BatchResult, CacheReset, Mode, compare_to_reference, verdict_of
from suite.stages.batch.settings import BatchSettings, batch_prompt, settings
from suite.stages.batch.trials import other_texts, trial_prompts
from suite.stages.gate_models import GatePrompt
from suite.stages.repeat import TOP_LOGPROBS, death_reason_of, logprobs_for

if TYPE_CHECKING:
    from suite.stages.base import StageContext

log = logging.getLogger(__name__)

MAX_CONSECUTIVE_FAILED_TRIALS = 3


async def _send_batch(client: OpenAIClient, prompts: list[str], max_tokens: int,
                      extra: dict[str, Any]) -> tuple[list[Completion], float]:
    """Every prompt at once on the concurrent client; the completions in order and the wall time."""
    async with client.async_client(max_connections=len(prompts)) as aclient:
        async def one(p: str) -> Completion:
            try:
                return await aclient.complete_stream(p, max_tokens=max_tokens, extra=extra or None)
            except ClientError as exc:
                return Completion(error=str(exc))
        t0 = time.perf_counter()
        outs = await asyncio.gather(*(one(p) for p in prompts))
        return list(outs), time.perf_counter() - t0


def send_batch(client: OpenAIClient, prompts: list[str], max_tokens: int,
               extra: dict[str, Any]) -> tuple[list[Completion], float]:
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        return runner.run(_send_batch(client, prompts, max_tokens, extra))


def reset_cache(client: OpenAIClient, path: str | None) -> str | None:
    """POST the runtime's cache-reset endpoint; None when it worked, else why not."""
    if path is None:
        return "not offered"
    try:
        status, text = client.post_empty(path)
    except ClientError as exc:  # recorded; the trial goes on
        return str(exc)
    if status >= 300:
        return f"POST {path}: HTTP {status}: {text[:160]}"
    return None


def _sample(index: int, c: Completion) -> Sample:
    return Sample(index=index, text=c.text, token_ids=c.token_ids, logprobs=c.logprobs,
                  top_logprobs=c.top_logprobs, completion_tokens=c.completion_tokens,
                  finish_reason=c.finish_reason, error=c.error)


def run_batch(client: OpenAIClient, prompt: GatePrompt, *, trials: int, batch_sizes: list[int],
              max_tokens_cap: int | None = None, logprobs: bool = True, reset_path: str | None = None,
              record: Callable[..., None] | None = None, alive: Callable[[], bool] | None = None,
              death_reason: Callable[[], str | None] | None = None,
              energy: Callable[[], float | None] | None = None, modes: tuple[Mode, ...] = MODES) -> BatchResult:
    """The three modes on a running runtime; each request recorded as it finishes its batch.

    `energy()`, where given, reads the GPU's energy counter in joules (None where it cannot):
    the mode's joules are the counter's difference over its trials.
    """
    if trials < 1:
        raise SuiteError(f"batch composition: trials {trials}: at least 1")
    if not batch_sizes or any(b < 2 for b in batch_sizes):
        raise SuiteError(f"batch composition: batch sizes {batch_sizes}: each at least 2")
    max_tokens = min(prompt.max_tokens, max_tokens_cap) if max_tokens_cap else prompt.max_tokens
    params = client.params
    extra: dict[str, Any] = {"logprobs": TOP_LOGPROBS} if logprobs else {}
    corpus = other_texts()
    t_stage = time.perf_counter()
    reset_state: str | None = None  # the first failure of a reset, if any
    stopped: str | None = None
    reference: Sample | None = None
    reference_tied = False
    alone_samples: list[Sample] = []
    results: list[BatchMode] = []
    all_target: list[Sample] = []
    for mode in modes:
        if stopped:
            break
        samples: list[Sample] = []
        sizes: list[int] = []
        positions: list[int] = []
        prefixes: list[int] = []
        requests = failed = tokens = 0
        wall = 0.0
        failed_trials = 0
        e0 = energy() if energy else None
        for trial in range(trials):
            if reset_path is not None:
                why = reset_cache(client, reset_path)
                if why and reset_state is None:
                    reset_state = why
                    log.warning("batch: the cache reset failed: %s", why)
            size = 1 if mode == "single" else batch_sizes[trial % len(batch_sizes)]
            prompts, position, shared = trial_prompts(mode, trial, prompt.prompt, size, corpus)
            outs, dt = send_batch(client, prompts, max_tokens, extra)
            wall += dt
            sizes.append(len(prompts))
            positions.append(position)
            if shared is not None:
                prefixes.append(shared)
            for k, c in enumerate(outs):
                requests += 1
                failed += bool(c.error)
                tokens += (c.n_tokens or 0) if not c.error else 0
                if record is not None:
                    record("batch", mode=mode, trial=trial, role="target" if k == position else "other",
                           position=k, batch_size=len(prompts), prompt_id=prompt.id if k == position else None,
                           prompt_chars=len(prompts[k]), shared_prefix_chars=shared if k != position else None,
                           index=trial, seed=params.seed, temperature=params.temperature, max_tokens=max_tokens,
                           text=c.text, token_ids=c.token_ids, logprobs=c.logprobs, top_logprobs=c.top_logprobs,
                           finish_reason=c.finish_reason, prompt_tokens=c.prompt_tokens,
                           completion_tokens=c.completion_tokens, e2e_s=c.e2e_s, ttft_s=c.ttft_s, error=c.error)
            target = outs[position]
            samples.append(_sample(trial, target))
            failed_trials = failed_trials + 1 if target.error else 0
            if target.error:
                log.warning("batch %s trial %d: the target failed: %s", mode, trial, target.error)
                if alive is not None and not alive():
                    why = (death_reason() if death_reason else None) or "no error line in its log"
                    stopped = f"the runtime died during the {mode} mode, trial {trial}: {why}"
                elif failed_trials >= MAX_CONSECUTIVE_FAILED_TRIALS:
                    stopped = f"{failed_trials} trials in a row failed in the {mode} mode; last error: {target.error}"
                if stopped:
                    log.error("batch stopped: %s", stopped)
                    break
        e1 = energy() if energy else None
        a = analyse(samples, process_cold=not results)
        m = BatchMode(mode=mode, trials=len(samples), batch_sizes=sizes, target_positions=positions,
                      prefix_chars=prefixes, requests=requests, failed=failed, target=a, output_tokens=tokens,
                      wall_s=round(wall, 4), tokens_per_s=round(tokens / wall, 3) if wall > 0 and tokens else None)
        if e0 is not None and e1 is not None and e1 >= e0:
            m.energy_j = round(e1 - e0, 3)
            m.j_per_token = round(m.energy_j / tokens, 6) if tokens else None
        if mode == "single" and a.answers:
            first = a.answers[0]
            reference_tied = a.modal_tied
            reference = next(s for s in samples if s.index == first.first_index)
            alone_samples = list(samples)
        compare_to_reference(m, samples, reference, alone_samples)
        results.append(m)
        all_target.extend(s.model_copy(update={"index": len(all_target) + i}) for i, s in enumerate(samples))
        log.info("batch %s: %s", mode, m.line)
    varies, verdict = verdict_of(results, reference_tied, stopped, max_tokens)
    overall = analyse(all_target) if all_target else None
    ref_answer = None
    single = next((m for m in results if m.mode == "single"), None)
    if single is not None and single.target.answers:
        ref_answer = single.target.answers[0]
    cache: CacheReset = "not-offered" if reset_path is None else ("failed" if reset_state else "per-trial")
    result = BatchResult(
        prompt_id=prompt.id, prompt_version=prompt.version, prompt_sha256=prompt.sha256, max_tokens=max_tokens,
        trials=trials, batch_sizes=list(batch_sizes), seed=params.seed, temperature=params.temperature,
        logprobs=logprobs, cache_reset=cache, cache_reset_path=reset_path,
        cache_reset_note=reset_state if reset_path else "the runtime's definition names no cache-reset endpoint",
        modes=results, reference=ref_answer, reference_tied=reference_tied, varies_with_batch=varies,
        distinct_overall=overall.distinct_answers if overall else 0,
        answered_overall=overall.answered if overall else 0, verdict=verdict, stopped_reason=stopped,
        wall_s=round(time.perf_counter() - t_stage, 4))
    joules = [m.energy_j for m in results]
    if results and all(j is not None for j in joules):
        result.energy_j = round(sum(j for j in joules if j is not None), 3)
        out_tokens = sum(m.output_tokens for m in results)
        result.j_per_token = round(result.energy_j / out_tokens, 6) if out_tokens else None
    return result


def run(ctx: StageContext) -> BatchResult:
    """The batch-composition stage on the arm's running runtime."""
    from suite import gpu

    prompt, own = batch_prompt(ctx.profile), ctx.own(BatchSettings) or settings(ctx.profile)
    result = run_batch(
        ctx.client, prompt, trials=own.trials, batch_sizes=list(own.sizes),
        max_tokens_cap=ctx.profile.gate_max_tokens, logprobs=logprobs_for(ctx),
        reset_path=ctx.runtime.server.reset_cache_path, record=ctx.record_request, alive=ctx.running.alive,
        death_reason=death_reason_of(ctx.running), energy=gpu.energy_reader())
    log.debug("batch %s: %s", ctx.arm_name, result.verdict)
    return result

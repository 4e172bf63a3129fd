"""The batch-composition stage: one target prompt alone, then inside concurrent batches of others.

The design of vLLM's online batch-invariance test (tests/v1/determinism) and SGLang's
`test_deterministic` modes. One target prompt (its setting `prompt`, `--batch-prompt`, else
short-open) is sent at the card's seed and sampling in three modes, `trials` trials each:

- `single`: the target alone, one request in flight. Its most common answer is the reference the
  other modes are compared with (a runtime whose answer varies even alone is reported as such).
- `mixed`: the target inside a batch of other prompts of varied lengths (slices of the shipped
  extraction documents, from a few words to a few thousand characters), all sent at once on the
  suite's concurrent client (`AsyncOpenAIClient`); the batch size cycles through its setting
  `sizes` and the target's place in the batch moves from trial to trial.
- `prefix`: the target inside a batch of prompts that share a prefix of varied lengths with it
  (from its first word to the whole prompt and beyond), so the runtime's prefix cache and
  chunked prefill meet the target's own prompt in other requests.

Between trials the runtime's prefix cache is reset where its definition offers an endpoint for it
(`[server] reset_cache_path`, e.g. vLLM's `POST /reset_prefix_cache`); where it offers none the
result says so. Every request (target and the others) is one `batch` request line.

Per mode: distinct answers of the target with n (those that answered), how many equal the
single-mode reference, the first token where an answer departs from the reference and the logprob
gap there (`suite.analysis.repro.divergence`: each answer's own token's logprob, the reference's
top-1/top-2 margin where top logprobs came back, and the largest logprob difference over the
tokens shared before the split), the largest logprob difference of answers with the reference's
very tokens (drift without a changed token), and the mode's output tokens per second.

Its settings are its own (`BatchSettings`, per profile in `STAGE.profiles`, per run from the
command line's `--batch-*` options): whether the bench runs it after the gate (`composition`; the
full profile does), the trials per mode, the batch sizes and the target.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from suite.analysis.claims import Claim, Evidence, caveat_cut, run_caveats
from suite.analysis.repro import (
    ALPHA,
    DistinctAnswer,
    Divergence,
    PromptAnalysis,
    Sample,
    analyse,
    answer_key,
    divergence,
    launches_for_bound,
    prefix_logprob_diff,
    unseen_share_bound,
)
from suite.analysis.stats import fisher_fewer_others, requests_needed
from suite.client import ClientError, Completion, OpenAIClient, event_loop_factory
from suite.errors import SuiteError
from suite.stages.base import ColumnType, ExportTable, SectionTemplate, Stage, StageOption
from suite.stages.lines import RequestLineBase
from suite.stages.repeat import TOP_LOGPROBS, GatePrompt, death_reason_of, load_gate_prompts, logprobs_for, select_prompts

if TYPE_CHECKING:
    from suite.profiles import Profile
    from suite.stages.base import StageContext

log = logging.getLogger(__name__)

Mode = Literal["single", "mixed", "prefix"]
MODES: tuple[Mode, ...] = ("single", "mixed", "prefix")
# The other prompts' lengths in characters, from a few words to a few pages: a batch mixes
# prefill-heavy and decode-heavy requests (cycled, then shuffled per trial).
OTHER_LENGTHS = (40, 160, 600, 1400, 2400)
MAX_CONSECUTIVE_FAILED_TRIALS = 3


class BatchMode(BaseModel):
    """One mode's trials: what the target answered, against the single-mode reference."""

    mode: Mode
    trials: int  # trials run
    batch_sizes: list[int]  # per trial: requests in flight at once (1 in single mode)
    target_positions: list[int] = Field(default_factory=list)  # per trial: the target's place in its batch
    prefix_chars: list[int] = Field(default_factory=list)  # prefix mode: shared prefix lengths used (characters)
    requests: int  # every request of the mode, the target's and the others'
    failed: int  # of them, how many failed
    target: PromptAnalysis  # the target's answers in this mode (distinct, n answered, lengths, pattern)
    same_as_single: int | None = None  # target answers with the reference's tokens (None: no reference)
    differ_from_single: int | None = None
    # Target answers that the target never gave alone (none of the single mode's answers): what
    # only a batch brought about; differs from `differ_from_single` where the answer varies alone.
    unseen_alone: int | None = None
    # The earliest departure of any target answer from the reference, and per distinct answer
    # that differs from it (`rank` is the answer's rank within this mode, 0 = the mode's modal).
    first_divergence: Divergence | None = None
    divergences: list[Divergence] = Field(default_factory=list)
    # Target answers with the reference's very tokens: largest logprob difference from it (nats).
    same_tokens_logprob_diff: float | None = None
    output_tokens: int = 0  # every answered request's tokens
    wall_s: float = 0.0  # time with requests in flight
    tokens_per_s: float | None = None
    energy_j: float | None = None  # the GPU's energy counter over the mode's trials (where NVML reads one)
    j_per_token: float | None = None

    @property
    def line(self) -> str:
        n = self.target.answered
        s = f"{self.mode}: {self.target.distinct_answers} distinct of {n}"
        if self.mode != "single" and self.differ_from_single is not None:
            s += f", {self.differ_from_single} of {n} differ from the one-at-a-time answer"
            d = self.first_divergence
            if d is not None and self.differ_from_single:
                s += f" (first at {gap_text(d)})"
        elif self.mode != "single":
            s += " (no one-at-a-time answer to compare)"
        return s


CacheReset = Literal["per-trial", "not-offered", "failed"]


class BatchResult(BaseModel):
    """The target prompt alone and in batches: per mode, distinct answers and departures."""

    prompt_id: str
    prompt_version: int
    prompt_sha256: str
    max_tokens: int
    trials: int  # per mode, as asked
    batch_sizes: list[int]
    seed: int | None
    temperature: float
    logprobs: bool
    cache_reset: CacheReset
    cache_reset_path: str | None = None
    cache_reset_note: str | None = None  # why it failed, or what was offered instead
    modes: list[BatchMode]
    reference: DistinctAnswer | None = None  # the single mode's most common answer
    reference_tied: bool = False  # single mode had no one most common answer: the first seen is the reference
    # True: a batch mode gave an answer the target never gave alone; False: every batched answer is
    # the one-at-a-time answer; None: too few answers, or the answer varies alone and the batches
    # gave only answers also seen alone.
    varies_with_batch: bool | None
    distinct_overall: int  # distinct target answers over every mode
    answered_overall: int
    verdict: str
    stopped_reason: str | None = None
    wall_s: float
    energy_j: float | None = None
    j_per_token: float | None = None

    def mode(self, name: str) -> BatchMode | None:
        return next((m for m in self.modes if m.mode == name), None)


def gap_text(d: Divergence) -> str:
    """`token 12 (reference -0.69, other -0.71; margin 0.02 nats)`: where and how close."""
    where = f"token {d.token_index}" if d.token_index is not None else f"character {d.char_index}"
    parts = []
    if d.modal_logprob is not None and d.other_logprob is not None:
        parts.append(f"logprob gap {abs(d.modal_logprob - d.other_logprob):.3g} nats")
    if d.modal_margin is not None:
        parts.append(f"reference top-1/top-2 margin {d.modal_margin:.3g}")
    if d.prefix_logprob_diff:
        parts.append(f"drift before it {d.prefix_logprob_diff:.2g}")
    return where + (f", {'; '.join(parts)}" if parts else "")


# -- the prompts of a trial -----------------------------------------------------------------------

def other_texts() -> str:
    """The text the other prompts are cut from: the shipped extraction documents, joined."""
    from suite.stages.extraction import load_documents

    return "\n\n".join(s.text.strip() for d in load_documents() for s in d.sections)


def trial_prompts(mode: Mode, trial: int, target: str, size: int, corpus: str,
                  seed: int = 0) -> tuple[list[str], int, int | None]:
    """The prompts of one trial in sending order, the target's place, and (prefix mode) the
    longest shared prefix. Deterministic in (mode, trial, seed): a rerun sends the same batches."""
    if mode == "single" or size <= 1:
        return [target], 0, None
    rng = random.Random(f"{seed}:{mode}:{trial}")
    n_other = size - 1
    others: list[str] = []
    shared: list[int] = []
    for k in range(n_other):
        length = OTHER_LENGTHS[(trial + k) % len(OTHER_LENGTHS)]
        start = rng.randrange(0, max(1, len(corpus) - length))
        piece = corpus[start:start + length]
        if mode == "prefix":
            # a shared prefix from the first word to the whole target, then other text
            cut = max(1, round(len(target) * (k + 1) / n_other))
            cut = min(len(target), cut)
            shared.append(cut)
            piece = target[:cut] + (" " if cut < len(target) else "\n") + piece
        others.append(piece)
    position = (trial * 7 + 3) % size if size > 1 else 0
    prompts = others[:position] + [target] + others[position:]
    return prompts, position, max(shared) if shared else None


# -- running --------------------------------------------------------------------------------------

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


def compare_to_reference(mode: BatchMode, samples: list[Sample], reference: Sample | None,
                         alone: list[Sample] | None = None) -> BatchMode:
    """Fill the mode's comparison with the single-mode reference (and every answer given alone)."""
    ok = [s for s in samples if s.ok]
    if reference is None or not ok:
        return mode
    by = mode.target.compared_by
    ref_key = answer_key(reference, by)
    same = [s for s in ok if answer_key(s, by) == ref_key]
    mode.same_as_single, mode.differ_from_single = len(same), len(ok) - len(same)
    alone_keys = {answer_key(s, by) for s in (alone or [reference]) if s.ok}
    mode.unseen_alone = sum(1 for s in ok if answer_key(s, by) not in alone_keys)
    diffs = [d for s in same if (d := prefix_logprob_diff(reference, s)) is not None]
    mode.same_tokens_logprob_diff = max(diffs) if diffs else None
    seen: dict[Any, Divergence] = {}
    for s in ok:
        key = answer_key(s, by)
        if key == ref_key or key in seen:
            continue
        rank = next((a.rank for a in mode.target.answers if s.index in a.indices), 0)
        count = sum(1 for x in ok if answer_key(x, by) == key)
        seen[key] = divergence(reference, s, rank, count, by)
    mode.divergences = sorted(seen.values(), key=lambda d: (d.token_index if d.token_index is not None
                                                            else d.char_index, d.rank))
    mode.first_divergence = mode.divergences[0] if mode.divergences else None
    return mode


def verdict_of(modes: list[BatchMode], reference_tied: bool, stopped: str | None,
               max_tokens: int | None = None) -> tuple[bool | None, str]:
    """Whether the target's answer depended on its batch, each figure with its n."""
    single = next((m for m in modes if m.mode == "single"), None)
    batched = [m for m in modes if m.mode != "single"]
    if single is None or single.target.answered == 0:
        return None, f"undetermined: the target never answered alone{f' ({stopped})' if stopped else ''}"
    alone = (f"alone {single.target.distinct_answers} distinct of {single.target.answered}"
             + (" (tied: the first answer seen is the reference)" if reference_tied else ""))
    new = [m for m in batched if m.unseen_alone]
    varied = [m for m in batched if m.differ_from_single]
    answered = [m for m in batched if m.target.answered]
    if new:
        parts = "; ".join(m.line + (f", {m.unseen_alone} never given alone" if single.target.distinct_answers > 1
                                    else "") for m in varied)
        # A test, not a glance: the batched answers must depart from the one-at-a-time answer more
        # often than the answers given alone do (an answer that varies by itself shows new answers
        # in batches too, by chance).
        n_alone, others_alone = single.target.answered, single.differ_from_single or 0
        n_batched = sum(m.target.answered for m in answered)
        differ = sum(m.differ_from_single or 0 for m in answered)
        p = fisher_fewer_others(others_alone, n_alone, differ, n_batched)
        test = (f"{differ} of {n_batched} batched answers differ from the one-at-a-time answer against "
                f"{others_alone} of {n_alone} alone; one-sided Fisher's exact test p = {p:.2g}")
        if p is not None and p <= ALPHA:
            return True, f"varies with batch composition: {parts}; {alone} ({test} <= {ALPHA:g})"
        need = requests_needed(differ / n_batched) if n_batched else None
        return None, (f"undetermined: {parts}; {alone} ({test} > {ALPHA:g}: cannot tell a batch effect from "
                      "an answer that varies by itself"
                      + (f"; about {need} trials alone and {need} batched would tell" if need else "") + ")")
    if varied:  # every batched answer was also given alone: the answer varies alone, not with the batch
        parts = "; ".join(m.line for m in varied)
        return None, (f"undetermined: the answer varies alone ({single.target.pattern_text or alone}); "
                      f"every batched answer was also given alone: {parts}")
    if not answered:
        why = stopped or "no batched target request answered"
        return None, f"undetermined: {why}; {alone}"
    n = sum(m.target.answered for m in answered)
    bound = unseen_share_bound(n)
    if bound is None:  # too few to say what a batch effect could still hide
        return None, (f"undetermined: every batched answer equals the one-at-a-time answer "
                      f"({', '.join(f'{m.mode} {m.target.answered}' for m in answered)}; {alone}), but {n} batched "
                      f"answers cannot bound a batch effect ({launches_for_bound()} would)"
                      + (f"; {stopped}" if stopped else ""))
    cut = sum(m.target.truncated for m in modes)
    tail = (f"; {stopped}" if stopped else "") + (
        f"; {cut} of {sum(m.target.answered for m in modes)} target answers cut at "
        f"{f'{max_tokens} tokens' if max_tokens else 'the token cap'}: they may differ past the cap" if cut else "")
    return False, (f"the same answer in every batch: {', '.join(f'{m.mode} {m.target.answered}' for m in answered)} "
                   f"target answers equal the one-at-a-time answer ({alone})"
                   + (f"; with {n} batched answers, a batch effect on more than {bound:.0%} of batches "
                      "could still be missed (95%)" if bound is not None else "") + tail)


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


DEFAULT_TARGET = "short-open"


class BatchSettings(BaseModel):
    """The stage's settings: its defaults here, a profile's own values in `STAGE.profiles`."""

    model_config = ConfigDict(extra="forbid")

    composition: bool = False  # run in the bench, after the gate (`--batch-composition`)
    trials: int = Field(default=5, ge=1)  # per mode
    sizes: list[Annotated[int, Field(ge=2)]] = Field(default_factory=lambda: [4, 8, 16], min_length=1)
    prompt: str | None = None  # the target gate prompt (None: short-open, else the profile's first)


def settings(profile: Profile) -> BatchSettings:
    """This stage's settings for a profile (its values, then the run's own)."""
    resolved = STAGE.settings_for(profile)
    assert isinstance(resolved, BatchSettings)
    return resolved


def batch_prompt(profile: Profile) -> GatePrompt:
    """The target: the setting `prompt`, else short-open where it is one of the profile's gate
    prompts, else its first gate prompt (a gate prompt id that does not exist is one line)."""
    wanted = settings(profile).prompt
    if wanted is None:
        ids = profile.gate_prompts
        wanted = DEFAULT_TARGET if ids is None or DEFAULT_TARGET in ids else ids[0]
    return select_prompts([wanted])[0]


def _preflight(own: BaseModel, plans: list[Any]) -> BaseModel:
    """The target prompt named by --batch-prompt, checked whether or not the stage runs."""
    wanted = getattr(own, "prompt", None)
    if wanted is not None:
        known = load_gate_prompts()
        if wanted not in known:
            raise SuiteError(f"--batch-prompt {wanted!r}: not a gate prompt; known: {', '.join(known)}")
    return own


def planned(profile: Profile) -> int:
    own = settings(profile)
    sizes = own.sizes or [2]
    per_mode = sum(sizes[t % len(sizes)] for t in range(own.trials))
    return own.trials + 2 * per_mode


def run(ctx: StageContext) -> BatchResult:
    """The batch-composition stage on the arm's running runtime."""
    from suite import gpu

    prompt, own = batch_prompt(ctx.profile), ctx.own(BatchSettings) or settings(ctx.profile)
    result = run_batch(
        ctx.client, prompt, trials=own.trials, batch_sizes=list(own.sizes),
        max_tokens_cap=ctx.profile.gate_max_tokens, logprobs=logprobs_for(ctx),
        reset_path=ctx.runtime.server.reset_cache_path, record=ctx.record_request, alive=ctx.running.alive,
        death_reason=death_reason_of(ctx.running), energy=gpu.energy_reader())
    log.info("batch %s: %s", ctx.arm_name, result.verdict)
    return result


def _inputs(profile: Profile) -> object:
    other_texts()
    return batch_prompt(profile)


def export_rows(result: BatchResult) -> list[dict[str, Any]]:
    """`suite export`'s batch table: one row per mode: the target's distinct answers with n, how many
    differ from its one-at-a-time answer, the first departure and the logprob gap there, tokens/s, energy."""
    rows = []
    b = result
    for m in b.modes:
        d = m.first_divergence
        rows.append({
            "prompt_id": b.prompt_id, "mode": m.mode, "trials": m.trials, "batch_sizes": list(m.batch_sizes),
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


# -- its request lines ------------------------------------------------------------------------------

class BatchLine(RequestLineBase):
    """One request of the batch-composition stage: the target prompt or one of the others in its batch."""

    kind: Literal["batch"]
    mode: Literal["single", "mixed", "prefix"]
    trial: int
    role: Literal["target", "other"]
    position: int  # its place in the batch's sending order
    batch_size: int
    prompt_id: str | None = None  # the target's gate prompt (None for the others)
    prompt_chars: int | None = None
    shared_prefix_chars: int | None = None  # prefix mode: the characters it shares with the target
    index: int = 0
    seed: int | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    ttft_s: float | None = None


def recompute(result: BatchResult, summary: Any = None) -> BatchResult:
    """The batch verdict made again from the modes' answers with today's test."""
    varies, verdict = verdict_of(result.modes, result.reference_tied, result.stopped_reason, result.max_tokens)
    return result.model_copy(update={"varies_with_batch": varies, "verdict": verdict})


def claims(result: BatchResult, summary: Any) -> list[Claim]:
    """Whether the target's answer depends on its batch, with the batched and alone counts, and
    the cost of the batched modes (tokens/s, J/token) beside the single mode's."""
    single = result.mode("single")
    batched = [m for m in result.modes if m.mode != "single"]
    n_batched = sum(m.target.answered for m in batched)
    differ = sum(m.differ_from_single or 0 for m in batched)
    word = ("varies with its batch" if result.varies_with_batch else
            "the same in every batch" if result.varies_with_batch is False else "undetermined")
    cut = sum(m.target.truncated for m in result.modes)
    answered = sum(m.target.answered for m in result.modes)
    return [Claim(stage="batch", kind="batch", arm=getattr(summary, "arm", ""), run_id=getattr(summary, "run_id", ""),
                  prompt=result.prompt_id, verdict=word,
                  good=None if result.varies_with_batch is None else not result.varies_with_batch,
                  counts={"batched": n_batched, "differ": differ, "alone": single.target.answered if single else 0},
                  evidence=Evidence(test="one-sided Fisher's exact test, batched against alone", n=n_batched,
                                    unit="batched answers",
                                    bound=unseen_share_bound(n_batched) if result.varies_with_batch is False else None),
                  caveats=caveat_cut(cut, answered) + run_caveats(summary, "batch"),
                  phrase=f"{differ} of {n_batched} batched answers differ from the one-at-a-time answer",
                  text=result.verdict)]
COLUMNS: dict[str, ColumnType] = {
    "prompt_id": "str", "mode": "str", "trials": "int", "batch_sizes": "list[int]", "requests": "int", "failed": "int",
    "answered": "int", "distinct_answers": "int", "same_as_single": "int", "differ_from_single": "int",
    "first_divergence_token": "int", "logprob_reference": "float", "logprob_other": "float",
    "reference_margin": "float", "same_tokens_logprob_diff": "float", "output_tokens": "int", "wall_s": "float",
    "tokens_per_s": "float", "energy_j": "float", "j_per_token": "float", "cache_reset": "str",
    "varies_with_batch": "bool"}



STAGE = Stage(name="batch", result=BatchResult, run=run, lines=(BatchLine,), fresh_runtimes=False, in_bench=False,
              summary="the target prompt alone, then inside batches of other prompts and of shared prefixes: "
                      "does its answer depend on its batch",
              planned=planned, inputs=_inputs,
              when=lambda p: settings(p).composition, after="gate",  # the profile's or --batch-composition
              settings=BatchSettings,
              options=(StageOption("--batch-composition", "composition", "Also send the target prompt inside "
                                   "batches of other prompts and of shared prefixes (on in the full profile).",
                                   kind="bool"),
                       StageOption("--batch-prompt", "prompt", "The gate prompt the batch-composition stage sends "
                                   "(default: short-open)."),
                       StageOption("--batch-trials", "trials", "Trials per batch-composition mode (default: the "
                                   "profile's).", kind="int"),
                       StageOption("--batch-sizes", "sizes", "Batch sizes the trials cycle through, e.g. 8,16,32 "
                                   "(default: the profile's).", kind="ints")),
              preflight=_preflight,
              profiles={"quick": {"trials": 2, "sizes": [3, 4]}, "full": {"composition": True, "trials": 8, "sizes": [8, 16, 32]}},
              profile_keys={"batch_composition": "composition", "batch_trials": "trials", "batch_sizes": "sizes",
                            "batch_prompt": "prompt"},
              tables=(ExportTable("batch", export_rows, COLUMNS),), exported_requests=("batch",),
              page_title="batch composition", recompute=recompute, claims=claims,
              section=SectionTemplate("section.html", "suite.stages.batch.view:page", slot="answers", order=0))

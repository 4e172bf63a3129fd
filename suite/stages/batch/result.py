"""The batch-composition stage's records and what is computed from them alone: per mode the
target's answers against the one-at-a-time reference (`BatchMode`), the stage's result
(`BatchResult`), its verdict (`verdict_of`, made again from the modes' answers by `recompute`, and
from the request lines by `from_lines`), a mode's answers compared with the single-mode reference
(`compare_to_reference`), its claims, the export's batch table and the stage's request line
(`BatchLine`). Nothing here runs a request; `suite.stages.batch.run` fills these records."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

from suite.analysis.claims import Claim, Evidence, caveat_cut, run_caveats
from suite.analysis.levels import CONFIDENCE, percent
from suite.analysis.repro import (
    ALPHA,
    DistinctAnswer,
    Divergence,
    PromptAnalysis,
    Sample,
    analyse,
    answer_groups,
    answer_key,
    divergence,
    launches_for_bound,
    prefix_logprob_diff,
    unseen_share_bound,
)
from suite.analysis.stats import fisher_fewer_others, requests_needed
from suite.stages.base import ColumnType
from suite.stages.lines import RequestLineBase

Mode = Literal["single", "mixed", "prefix"]
MODES: tuple[Mode, ...] = ("single", "mixed", "prefix")


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


def batch_test(modes: list[BatchMode]) -> tuple[int, int, int, int, float | None]:
    """The batch verdict's test: answers other than the one-at-a-time answer alone (of those given
    alone) against batched (of the batched answers), and the one-sided Fisher's exact p that the
    batched answers depart from it more often."""
    single = next((m for m in modes if m.mode == "single"), None)
    answered = [m for m in modes if m.mode != "single" and m.target.answered]
    n_alone, others_alone = (single.target.answered, single.differ_from_single or 0) if single else (0, 0)
    n_batched = sum(m.target.answered for m in answered)
    differ = sum(m.differ_from_single or 0 for m in answered)
    p = fisher_fewer_others(others_alone, n_alone, differ, n_batched) if n_alone and n_batched else None
    return others_alone, n_alone, differ, n_batched, p


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
        others_alone, n_alone, differ, n_batched, p = batch_test(modes)
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
                      f"could still be missed ({percent(CONFIDENCE)})" if bound is not None else "") + tail)


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


def _line_sample(q: Any) -> Sample:
    """A batch line as the analysis reads it, at its trial."""
    return Sample(index=q.index, text=q.text or "", token_ids=q.token_ids, logprobs=q.logprobs,
                  top_logprobs=getattr(q, "top_logprobs", None), completion_tokens=q.completion_tokens,
                  finish_reason=q.finish_reason, error=q.error)


def from_lines(result: BatchResult, lines: list[Any]) -> tuple[BatchResult, list[str]]:
    """The target's answers in every mode made from the request lines (the target's line of each
    trial) and checked against what the summary kept: where a mode's lines group otherwise (an
    answer edited, a trial added or dropped), every mode is analysed again from its lines, compared
    with the single mode's reference again and the verdict made again; each disagreement named."""
    by_mode: dict[str, list[Sample]] = {}
    for q in lines:
        if getattr(q, "kind", None) == "batch" and getattr(q, "role", None) == "target":
            by_mode.setdefault(q.mode, []).append(_line_sample(q))
    if not by_mode:
        return result, []
    said: list[str] = []
    again_of: dict[str, PromptAnalysis] = {}  # each mode's target answers as its lines make them
    for m in result.modes:
        own = by_mode.get(m.mode)
        if not own:
            continue
        own.sort(key=lambda s: s.index)
        a = again_of[m.mode] = analyse(own, process_cold=m.mode == result.modes[0].mode)
        if answer_groups(a.answers) != answer_groups(m.target.answers) or a.errors != m.target.errors:
            said.append(f"{m.mode}: the summary kept {m.target.distinct_answers} distinct of {m.target.answered} "
                        f"target answers, its request lines say {a.distinct_answers} distinct of {a.answered}; "
                        "the lines are used")
    if not said:
        return result, []
    modes: list[BatchMode] = []
    reference: Sample | None = None
    alone: list[Sample] = []
    tied = False
    everything: list[Sample] = []
    for m in result.modes:
        samples = by_mode.get(m.mode, [])
        if not samples:
            modes.append(m)
            continue
        a = again_of[m.mode]
        again = m.model_copy(update={"target": a, "same_as_single": None, "differ_from_single": None,
                                     "unseen_alone": None, "first_divergence": None, "divergences": [],
                                     "same_tokens_logprob_diff": None})
        if m.mode == "single" and a.answers:
            tied = a.modal_tied
            reference = next(s for s in samples if s.index == a.answers[0].first_index)
            alone = samples
        modes.append(compare_to_reference(again, samples, reference, alone))
        everything.extend(s.model_copy(update={"index": len(everything) + i}) for i, s in enumerate(samples))
    varies, verdict = verdict_of(modes, tied, result.stopped_reason, result.max_tokens)
    overall = analyse(everything) if everything else None
    single = next((m for m in modes if m.mode == "single"), None)
    return result.model_copy(update={
        "modes": modes, "reference_tied": tied, "varies_with_batch": varies, "verdict": verdict,
        "reference": single.target.answers[0] if single is not None and single.target.answers else None,
        "distinct_overall": overall.distinct_answers if overall else 0,
        "answered_overall": overall.answered if overall else 0}), said


def recompute(result: BatchResult, summary: Any = None) -> BatchResult:
    """The batch verdict made again from the modes' answers with today's test."""
    varies, verdict = verdict_of(result.modes, result.reference_tied, result.stopped_reason, result.max_tokens)
    return result.model_copy(update={"varies_with_batch": varies, "verdict": verdict})


# The batch claim's closed vocabulary (`Stage.verdicts`).
BatchVerdict = Literal["varies with its batch", "the same in every batch", "undetermined"]
VERDICTS: dict[str, tuple[str, ...]] = {"batch": get_args(BatchVerdict)}


def claims(result: BatchResult, summary: Any) -> list[Claim]:
    """Whether the target's answer depends on its batch, with the batched and alone counts, and
    the cost of the batched modes (tokens/s, J/token) beside the single mode's."""
    single = result.mode("single")
    batched = [m for m in result.modes if m.mode != "single"]
    n_batched = sum(m.target.answered for m in batched)
    differ = sum(m.differ_from_single or 0 for m in batched)
    word: BatchVerdict = ("varies with its batch" if result.varies_with_batch else
                          "the same in every batch" if result.varies_with_batch is False else "undetermined")
    cut = sum(m.target.truncated for m in result.modes)
    answered = sum(m.target.answered for m in result.modes)
    return [Claim(stage="batch", kind="batch", arm=getattr(summary, "arm", ""), run_id=getattr(summary, "run_id", ""),
                  prompt=result.prompt_id, verdict=word,
                  good=None if result.varies_with_batch is None else not result.varies_with_batch,
                  counts={"batched": n_batched, "differ": differ, "alone": single.target.answered if single else 0},
                  evidence=Evidence(test="one-sided Fisher's exact test, batched against alone", n=n_batched,
                                    unit="batched answers",
                                    # the test's p where the verdict rests on it (batched answers never given alone)
                                    p=batch_test(result.modes)[4] if any(m.unseen_alone for m in batched) else None,
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

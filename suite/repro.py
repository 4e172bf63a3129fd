"""Reproducibility analysis: how many different answers one configuration gave to one request.

Pure functions over recorded answers, no I/O. The gate, controls and restarts stages feed them
the answers they collected; the site and the CLI read what they return.

- Answers are compared by their generated token ids when every answer carries them, else by
  their exact text. Failed requests (an error instead of an answer) are left out of the counts
  and reported separately; an empty answer is an answer like any other.
- The modal answer is the most frequent one; a tie goes to the answer seen first.
- Lengths are in tokens (token ids, else the runtime's completion token count), with their
  counts, formatted as `973 ×9, 993 ×11`.
- Each non-modal answer gets the first token where it departs from the modal one and the
  logprob gap there: the modal token's logprob minus the other answer's token logprob (each
  taken from its own answer, both conditioned on the same prefix). An answer that is a prefix
  of the other departs where the shorter one ends (its token there is `None`).
- Cold (the first request after start) is compared with warm (the rest), so a cache effect
  shows as what it is.
- Across launches: the share of answer pairs from two different launches that are identical,
  with a bootstrap 95% interval (answers resampled within each launch).
"""

from __future__ import annotations

import logging
import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Hashable

from pydantic import BaseModel, Field

log = logging.getLogger(__name__)


class Sample(BaseModel):
    """One request's outcome, as the analysis needs it."""

    index: int  # order of the request within its series (0 = the first, cold one)
    text: str = ""
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    completion_tokens: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def n_tokens(self) -> int | None:
        if self.token_ids is not None:
            return len(self.token_ids)
        return self.completion_tokens


class LengthCount(BaseModel):
    tokens: int | None  # None: the runtime reported no token count
    count: int


class DistinctAnswer(BaseModel):
    """One distinct answer: how often it came, where, how long, and (short) what it said."""

    rank: int  # 0 = modal
    count: int
    share: float
    first_index: int
    indices: list[int]
    n_tokens: int | None
    text_preview: str
    text: str
    token_ids: list[int] | None = None


class Divergence(BaseModel):
    """Where a non-modal answer first departs from the modal one."""

    rank: int  # the answer's rank (1, 2, ...)
    count: int
    token_index: int | None  # None when compared by text
    char_index: int  # first differing character of the texts
    modal_token: int | None = None  # None: the modal answer ended there
    other_token: int | None = None  # None: the other answer ended there
    modal_logprob: float | None = None
    other_logprob: float | None = None
    logprob_gap: float | None = None  # modal_logprob - other_logprob
    modal_context: str = ""  # a few characters around the divergence, modal answer
    other_context: str = ""


class ColdWarm(BaseModel):
    cold_indices: list[int]
    cold_is_modal: bool | None  # None: the cold request failed
    cold_in_warm: bool | None  # the cold answer also appears among the warm ones
    warm_distinct: int
    warm_count: int


class PromptAnalysis(BaseModel):
    compared_by: str  # "token_ids" | "text"
    requests: int
    answered: int
    errors: int
    empty_answers: int
    distinct: int
    modal_share: float | None
    modal_tied: bool
    lengths: list[LengthCount]
    lengths_text: str
    answers: list[DistinctAnswer]
    divergences: list[Divergence]
    cold_warm: ColdWarm | None


def _compared_by(samples: Sequence[Sample]) -> str:
    ok = [s for s in samples if s.ok]
    return "token_ids" if ok and all(s.token_ids is not None for s in ok) else "text"


def answer_key(sample: Sample, compared_by: str) -> Hashable:
    if compared_by == "token_ids" and sample.token_ids is not None:
        return ("ids", tuple(sample.token_ids))
    return ("text", sample.text)


def group_answers(samples: Sequence[Sample], compared_by: str | None = None) -> list[list[Sample]]:
    """Successful samples grouped by answer, most frequent first; ties: first seen first."""
    by = compared_by or _compared_by(samples)
    groups: dict[Hashable, list[Sample]] = {}
    for s in sorted((s for s in samples if s.ok), key=lambda s: s.index):
        groups.setdefault(answer_key(s, by), []).append(s)
    return sorted(groups.values(), key=lambda g: (-len(g), g[0].index))


def format_lengths(lengths: Sequence[LengthCount]) -> str:
    """`973 ×9, 993 ×11`; an unknown length shows as `?`."""
    return ", ".join(f"{'?' if lc.tokens is None else lc.tokens} ×{lc.count}" for lc in lengths)


def length_counts(samples: Sequence[Sample]) -> list[LengthCount]:
    counts = Counter(s.n_tokens for s in samples if s.ok)
    ordered = sorted(counts.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
    return [LengthCount(tokens=k, count=v) for k, v in ordered]


def _first_diff(a: Sequence, b: Sequence) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n  # one is a prefix of the other (or they are equal)


def _context(text: str, at: int, width: int = 24) -> str:
    return text[max(0, at - width): at + width]


def _at(seq: Sequence | None, i: int):
    return seq[i] if seq is not None and 0 <= i < len(seq) else None


def divergence(modal: Sample, other: Sample, rank: int, count: int, compared_by: str) -> Divergence:
    char_index = _first_diff(modal.text, other.text)
    d = Divergence(rank=rank, count=count, token_index=None, char_index=char_index,
                   modal_context=_context(modal.text, char_index),
                   other_context=_context(other.text, char_index))
    if compared_by == "token_ids" and modal.token_ids is not None and other.token_ids is not None:
        i = _first_diff(modal.token_ids, other.token_ids)
        d.token_index = i
        d.modal_token = _at(modal.token_ids, i)
        d.other_token = _at(other.token_ids, i)
        # The logprob of each answer's own token at the point of departure. Where one answer
        # ended there (a prefix), its "token" is the end of the answer and has no logprob here.
        mlp = _at(modal.logprobs, i) if d.modal_token is not None else None
        olp = _at(other.logprobs, i) if d.other_token is not None else None
        d.modal_logprob = None if mlp is None or math.isnan(mlp) else mlp
        d.other_logprob = None if olp is None or math.isnan(olp) else olp
        if d.modal_logprob is not None and d.other_logprob is not None:
            d.logprob_gap = d.modal_logprob - d.other_logprob
    return d


def analyse(samples: Sequence[Sample], cold_count: int = 1, preview_chars: int = 160) -> PromptAnalysis:
    """Distinct answers, modal share, lengths, divergences and cold/warm of one prompt's series.

    `cold_count` is how many requests were sent before any other had finished (1 when one at a
    time; the concurrency when several clients sent the first wave together).
    """
    by = _compared_by(samples)
    ordered = sorted(samples, key=lambda s: s.index)
    ok = [s for s in ordered if s.ok]
    groups = group_answers(ordered, by)
    answers = [
        DistinctAnswer(rank=r, count=len(g), share=len(g) / len(ok), first_index=g[0].index,
                       indices=[s.index for s in g], n_tokens=g[0].n_tokens,
                       text_preview=g[0].text[:preview_chars], text=g[0].text, token_ids=g[0].token_ids)
        for r, g in enumerate(groups)
    ]
    divergences = [divergence(groups[0][0], g[0], r, len(g), by) for r, g in enumerate(groups) if r > 0]
    cold_warm = None
    if ordered:
        first_indices = [s.index for s in ordered[:max(1, cold_count)]]
        cold = [s for s in ordered if s.index in first_indices]
        warm = [s for s in ok if s.index not in first_indices]
        modal_key = answer_key(groups[0][0], by) if groups else None
        warm_keys = {answer_key(s, by) for s in warm}
        cold_ok = [s for s in cold if s.ok]
        cold_warm = ColdWarm(
            cold_indices=first_indices,
            cold_is_modal=(all(answer_key(s, by) == modal_key for s in cold_ok) if cold_ok else None),
            cold_in_warm=(all(answer_key(s, by) in warm_keys for s in cold_ok) if cold_ok and warm else None),
            warm_distinct=len(warm_keys),
            warm_count=len(warm),
        )
    return PromptAnalysis(
        compared_by=by,
        requests=len(ordered),
        answered=len(ok),
        errors=len(ordered) - len(ok),
        empty_answers=sum(1 for s in ok if s.text == ""),  # nothing a reader would see
        distinct=len(groups),
        modal_share=(len(groups[0]) / len(ok)) if ok else None,
        modal_tied=len(groups) > 1 and len(groups[0]) == len(groups[1]),
        lengths=(lc := length_counts(ordered)),
        lengths_text=format_lengths(lc),
        answers=answers,
        divergences=divergences,
        cold_warm=cold_warm,
    )


# -- across launches ------------------------------------------------------------------------------

def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty sequence."""
    if not values:
        raise ValueError("percentile of no values")
    xs = sorted(values)
    if len(xs) == 1:
        return float(xs[0])
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))


def bootstrap_ci(groups: Sequence[Sequence[Hashable]], statistic: Callable[[list[list[Hashable]]], float | None],
                 resamples: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap interval of `statistic`, resampling items within each group.

    Deterministic (fixed seed) so that the same answers always give the same interval. Resamples
    where the statistic is undefined are dropped; None if none is defined.
    """
    rng = random.Random(seed)
    values: list[float] = []
    for _ in range(resamples):
        sample = [[g[rng.randrange(len(g))] for _ in g] if g else [] for g in groups]
        v = statistic(sample)
        if v is not None:
            values.append(v)
    if not values:
        return None
    alpha = (1.0 - level) / 2.0
    return percentile(values, 100 * alpha), percentile(values, 100 * (1 - alpha))


def across_agreement(groups: Sequence[Sequence[Hashable]]) -> float | None:
    """Share of answer pairs from two different launches that are identical (None: no such pair)."""
    counts = [Counter(g) for g in groups]
    sizes = [len(g) for g in groups]
    agree = total = 0
    for i in range(len(groups)):
        for j in range(i + 1, len(groups)):
            total += sizes[i] * sizes[j]
            small, large = (counts[i], counts[j]) if len(counts[i]) <= len(counts[j]) else (counts[j], counts[i])
            agree += sum(c * large.get(k, 0) for k, c in small.items())
    return agree / total if total else None


class LaunchesAnalysis(BaseModel):
    compared_by: str
    launches: int
    within_distinct: list[int]  # per launch
    across_distinct: int  # over all launches' answers together
    modal_per_launch_distinct: int  # how many different modal answers the launches had
    agreement: float | None
    agreement_ci95: tuple[float, float] | None
    lengths_text: str
    errors: int
    answers_per_launch: list[int] = Field(default_factory=list)


def analyse_launches(launches: Sequence[Sequence[Sample]], resamples: int = 2000, seed: int = 0) -> LaunchesAnalysis:
    """Within-launch and across-launch distinct answers, and the across-launch agreement rate."""
    flat = [s for launch in launches for s in launch]
    by = _compared_by(flat)
    keyed = [[answer_key(s, by) for s in sorted(launch, key=lambda s: s.index) if s.ok] for launch in launches]
    modal_keys = set()
    for launch in launches:
        groups = group_answers(launch, by)
        if groups:
            modal_keys.add(answer_key(groups[0][0], by))
    ci = None
    if sum(1 for k in keyed if k) >= 2:
        ci = bootstrap_ci(keyed, across_agreement, resamples=resamples, seed=seed)
    return LaunchesAnalysis(
        compared_by=by,
        launches=len(launches),
        within_distinct=[len(set(k)) for k in keyed],
        across_distinct=len({k for ks in keyed for k in ks}),
        modal_per_launch_distinct=len(modal_keys),
        agreement=across_agreement(keyed),
        agreement_ci95=ci,
        lengths_text=format_lengths(length_counts(flat)),
        errors=sum(1 for s in flat if not s.ok),
        answers_per_launch=[len(k) for k in keyed],
    )

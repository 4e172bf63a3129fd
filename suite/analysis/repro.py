"""Reproducibility analysis: how many different answers one configuration gave to one request.

Pure functions over recorded answers, no I/O. The gate, controls and restarts stages feed them
the answers they collected; the site and the CLI read what they return.

- Answers are counted twice, by their generated token ids (where the runtime returns them) and
  by their exact text; the headline uses token ids when every answer carries them (an empty
  answer without ids counts as the empty sequence, so it does not switch the series to text),
  and a disagreement of the two counts (same text, different ids) is flagged. Failed requests
  are left out of the counts and reported separately; every count says how many answered.
- The modal answer is the most frequent one; a tie is reported as a tie (the cold-vs-modal
  comparison is then left empty rather than calling the first answer modal).
- Lengths are in tokens, with their counts (`973 ×9, 993 ×11`), and how many answers stopped at
  `max_tokens` (finish reason `length`): an answer cut at the cap may hide a divergence past it.
- Each non-modal answer gets the first token where it departs from the modal one and, where the
  runtime gave top-2 logprobs, the modal answer's top-1/top-2 margin there (how close it came to a
  tie). Within a series, the largest logprob difference between two requests over the prefix
  they share shows numerical drift even where the tokens agree.
- The pattern of a series: stable (one answer), a cold-start transient (every difference confined
  to the first request(s) after a start: the prompt-cache case), one switch that stays, or
  answers varying in random order (a kernel).
- A cold-start transient is named only where chance would rarely put the odd answers on the
  first request(s): with m odd answers among n, all on the c cold requests, random order does that
  with probability C(c, m) / C(n, m) (1 in 20 for one odd answer in 20); above 5 % the series is
  "undetermined" and says how many requests would tell. Where two or more launches show that shape,
  one switch that stays, placed at random in each, must also put it there at most 5 % of the time
  (c / (n - 1) per launch: two launches of 5 requests both changing right after the first, 1 in 16).
- Across launches: the share of answer pairs from two different launches that are identical
  (across-launch agreement), beside the share of pairs inside one launch (within-launch
  agreement). Its 95% interval is a jackknife t-interval over launches (sessions), not requests,
  joined with exact (Clopper-Pearson) projections of the pooled answers and of the launches'
  modal answers, which cover the even splits where the jackknife alone is narrow;
  with fewer than `MIN_LAUNCHES_FOR_CI` launches, or where every launch gave the same answer
  sequence, none is given: alike launches instead bound how often a launch would differ ("6 of 6
  alike: a launch that differs in more than 40 % of starts would likely have shown").
- Whether the launches differ is a permutation test over launch labels (the launches' answer
  distributions, chi-square statistic): chance inside a launch (a transient in one launch, a
  random-order launch that missed the minority answer, a 50/50 split) does not make launches
  differ. "Consistent" is said only of launches that all gave the same answer sequence, with the
  bound; "NOT consistent" only where the test rejects at 5 %; otherwise "no detectable difference".

Calibration: benchmarks/bench_calibration.py simulates these data with known truths and checks
every interval's coverage and every claim's false rate (benchmarks/results/calibration-*.txt).
"""

from __future__ import annotations

import logging
import math
import random
from collections import Counter
from collections.abc import Hashable, Sequence
from itertools import pairwise
from typing import Literal

from pydantic import BaseModel, Field

from suite.analysis.levels import ALPHA as LEVEL_ALPHA
from suite.analysis.levels import CONFIDENCE
from suite.analysis.stats import clopper_pearson, t_quantile
from suite.analysis.tokens import token_count

log = logging.getLogger(__name__)

# Below this many launches no interval over launches is given: alike launches bound nothing below
# a 50 % share of differing launches (2 * 0.5^K > 5 %), and an interval from 2-5 units is mostly width.
MIN_LAUNCHES_FOR_CI = 6
# The level of the tests behind "NOT consistent across launches" and "cold-start transient".
ALPHA = LEVEL_ALPHA
PERMUTATIONS = 2000
# Two logprobs of the same token further apart than this (nats) are reported as different.
LOGPROB_TOLERANCE = 1e-3
# The confidence with which "one answer in N" bounds how common an unseen answer can be.
UNSEEN_CONFIDENCE = CONFIDENCE

Pattern = Literal["stable", "cold-transient", "switch", "varies", "undetermined"]


class Sample(BaseModel):
    """One request's outcome, as the analysis needs it."""

    index: int  # order of the request within its series (0 = the first, cold one)
    text: str = ""
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    top_logprobs: list[list[float]] | None = None  # per token, the top-k logprobs, best first
    completion_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def n_tokens(self) -> int | None:
        """Tokens of the answer, by the suite's one rule (suite.analysis.tokens)."""
        return token_count(self.token_ids, self.completion_tokens, logprobs=self.logprobs)

    @property
    def truncated(self) -> bool:
        """The answer stopped at max_tokens, not at its own end."""
        return self.finish_reason == "length"

    def ids_or_empty(self) -> list[int] | None:
        """Token ids; an empty answer without ids is the empty sequence."""
        if self.token_ids is not None:
            return self.token_ids
        return [] if self.text == "" else None


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
    logprobs: list[float] | None = None  # of its first occurrence
    truncated: int = 0  # of its occurrences, how many stopped at max_tokens


def answer_groups(answers: Sequence[DistinctAnswer]) -> tuple[tuple[int, ...], ...]:
    """A series' answers as the request indices of each distinct answer: what its request lines
    decide, compared when a summary's kept answers are checked against them."""
    return tuple(sorted(tuple(sorted(a.indices)) for a in answers))


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
    # The modal answer's top-1 minus top-2 logprob at the point of departure (nats): near 0, the
    # runtime was close to a tie there; None without top-2 logprobs.
    modal_margin: float | None = None
    other_margin: float | None = None
    # Largest |logprob difference| of the two answers over the tokens they share before parting.
    prefix_logprob_diff: float | None = None
    modal_context: str = ""  # a few characters around the divergence, modal answer
    other_context: str = ""


class ColdWarm(BaseModel):
    cold_indices: list[int]
    cold_is_modal: bool | None  # None: the cold request failed, or the modal answer is tied
    cold_in_warm: bool | None  # the cold answer also appears among the warm ones
    warm_distinct: int
    warm_count: int
    modal_tied: bool = False  # no single modal answer: the cold-vs-modal comparison is left empty
    # True: the first request after the runtime started (caches of every kind empty); False: the
    # first request of this prompt, the process having served other requests before it.
    process_cold: bool = True


class PromptAnalysis(BaseModel):
    compared_by: str  # "token_ids" | "text": what the headline `distinct_answers` counts
    requests: int
    answered: int
    errors: int
    empty_answers: int
    distinct_answers: int  # by `compared_by`: the headline count
    distinct_by_text: int = 0
    distinct_by_ids: int | None = None  # None: not every answer carried token ids
    ids_text_disagree: bool = False  # the two counts differ (same text, different token ids)
    modal_share: float | None
    modal_tied: bool
    lengths: list[LengthCount]
    lengths_text: str
    truncated: int = 0  # answers that stopped at max_tokens
    answers: list[DistinctAnswer]
    divergences: list[Divergence]
    cold_warm: ColdWarm | None
    pattern: Pattern = "undetermined"
    pattern_text: str = ""
    # Where the answers differ only at the first request(s): how often random order would put them
    # there (C(c, m) / C(n, m)); "cold-transient" needs it at most ALPHA.
    cold_transient_p: float | None = None
    # Within the series: the largest logprob difference between two requests over the tokens
    # they share (0.0: identical logprobs); None without logprobs.
    max_logprob_diff: float | None = None
    # With one answer in `answered`, an answer at least this common would have been seen with
    # 95% probability (1 - 0.05^(1/n)): what "one answer" bounds.
    unseen_share_bound: float | None = None


def unseen_share_bound(n: int, confidence: float = UNSEEN_CONFIDENCE) -> float | None:
    """The smallest share an answer can have and still be missed by n draws with `confidence`.

    n alike answers from two answers at shares 1 - p and p come with probability (1 - p)^n + p^n;
    the bound is the p <= 50 % where that falls to 1 - confidence: about 14% at n = 20. None below
    6 answers, where even an even split gives n alike answers more often than that (5 alike
    answers in 5 happen 6 % of the time at 50/50).
    """
    return alike_bound(n, confidence)


def _compared_by(samples: Sequence[Sample]) -> str:
    ok = [s for s in samples if s.ok]
    return "token_ids" if ok and all(s.ids_or_empty() is not None for s in ok) else "text"


def answer_key(sample: Sample, compared_by: str) -> Hashable:
    ids = sample.ids_or_empty()
    if compared_by == "token_ids" and ids is not None:
        return ("ids", tuple(ids))
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


def first_diff(a: Sequence, b: Sequence) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n  # one is a prefix of the other (or they are equal)


def _context(text: str, at: int, width: int = 24) -> str:
    return text[max(0, at - width): at + width]


def _at(seq: Sequence | None, i: int):
    return seq[i] if seq is not None and 0 <= i < len(seq) else None


def _finite(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) else x


def _margin(top: list[list[float]] | None, i: int) -> float | None:
    """Top-1 minus top-2 logprob at token i, from the runtime's top-k logprobs."""
    row = _at(top, i)
    if not row or len(row) < 2:
        return None
    best = sorted((x for x in row if x is not None and not math.isnan(x)), reverse=True)
    return best[0] - best[1] if len(best) >= 2 else None


def prefix_logprob_diff(a: Sample, b: Sample) -> float | None:
    """Largest |logprob(a) - logprob(b)| over the tokens a and b share before they part.

    None when either lacks token ids or logprobs, or they share no token.
    """
    ia, ib = a.ids_or_empty(), b.ids_or_empty()
    if ia is None or ib is None or a.logprobs is None or b.logprobs is None:
        return None
    shared = min(first_diff(ia, ib), len(a.logprobs), len(b.logprobs))
    diffs = [abs(x - y) for x, y in zip(a.logprobs[:shared], b.logprobs[:shared], strict=True)
             if not math.isnan(x) and not math.isnan(y)]
    return max(diffs) if diffs else None


def divergence(modal: Sample, other: Sample, rank: int, count: int, compared_by: str) -> Divergence:
    char_index = first_diff(modal.text, other.text)
    d = Divergence(rank=rank, count=count, token_index=None, char_index=char_index,
                   modal_context=_context(modal.text, char_index),
                   other_context=_context(other.text, char_index))
    mi, oi = modal.ids_or_empty(), other.ids_or_empty()
    if compared_by == "token_ids" and mi is not None and oi is not None:
        i = first_diff(mi, oi)
        d.token_index = i
        d.modal_token = _at(mi, i)
        d.other_token = _at(oi, i)
        # Each answer's own token's logprob at the point of departure. Where one answer ended
        # there (a prefix), its "token" is the end of the answer and has no logprob here.
        d.modal_logprob = _finite(_at(modal.logprobs, i)) if d.modal_token is not None else None
        d.other_logprob = _finite(_at(other.logprobs, i)) if d.other_token is not None else None
        d.modal_margin = _margin(modal.top_logprobs, i) if d.modal_token is not None else None
        d.other_margin = _margin(other.top_logprobs, i) if d.other_token is not None else None
        d.prefix_logprob_diff = prefix_logprob_diff(modal, other)
    return d


def series_pattern(ordered_ok: Sequence[Sample], by: str, cold_indices: Sequence[int],
                   process_cold: bool = True) -> tuple[Pattern, str]:
    """How the answers of one series (in request order) vary: the mechanism's fingerprint.

    `process_cold`: the series began right after the runtime started (else: its first request
    was only the first of this prompt).
    """
    keys = [answer_key(s, by) for s in ordered_ok]
    if len(keys) < 2:
        return "undetermined", f"{len(keys)} answer(s): too few to judge"
    if len(set(keys)) == 1:
        return "stable", f"one answer in {len(keys)}"
    cold = set(cold_indices)
    warm = [answer_key(s, by) for s in ordered_ok if s.index not in cold]
    if len(warm) >= 2 and len(set(warm)) == 1:
        n_cold = sum(1 for s in ordered_ok if s.index in cold and answer_key(s, by) != warm[0])
        when = "after the start" if process_cold else "of this prompt"
        first = (f"the first request {when} differs" if n_cold == 1
                 else f"{n_cold} of the first {len(cold)} requests {when} differ")
        return "cold-transient", (f"cold-start transient: only {first} ({n_cold} of {len(keys)}); "
                                  f"the {len(warm)} after agree")
    changes = sum(1 for a, b in pairwise(keys) if a != b)
    if changes == 1:
        at = next(i for i, (a, b) in enumerate(pairwise(keys)) if a != b) + 1
        if len(keys) - at >= 2:  # "it stayed" needs a request after the one that changed it
            return "switch", (f"one switch: request {ordered_ok[at].index + 1} changed the answer "
                              f"and it stayed ({at} before, {len(keys) - at} after)")
        return "varies", (f"only the last request ({ordered_ok[at].index + 1}) differs: too few requests after "
                          "it to say whether the change stays")
    return "varies", (f"answers vary from request to request ({len(set(keys))} distinct, {changes} changes in "
                      f"{len(keys)}; their order is not tested)")


def joint_p(ps: Sequence[float | None]) -> float | None:
    """The product of independent p-values: None where there are none, or one of them is None."""
    known = [p for p in ps if p is not None]
    return math.prod(known) if known and len(known) == len(ps) else None


def cold_transient_p(ordered_ok: Sequence[Sample], by: str, cold_indices: Sequence[int]) -> float | None:
    """How often random order would put every odd answer of the series on its cold request(s).

    Odd answers: those unlike the answer every later request gave. With m of them among n answers,
    all on the c cold requests: C(c, m) / C(n, m). None unless the series has that shape.
    """
    cold = set(cold_indices)
    warm = {answer_key(s, by) for s in ordered_ok if s.index not in cold}
    if len(warm) != 1:
        return None
    (w,) = warm
    c = sum(1 for s in ordered_ok if s.index in cold)
    m = sum(1 for s in ordered_ok if s.index in cold and answer_key(s, by) != w)
    n = len(ordered_ok)
    if m == 0 or n < 2:
        return None
    return math.comb(c, m) / math.comb(n, m)


def switch_at_start_p(n: int, c: int = 1) -> float | None:
    """How often one switch that stays, at a uniformly placed request, would fall on the c cold ones.

    A series of n answers whose answer changes once and stays changes after one of its first n - 1
    requests; the odd answers are then confined to the c cold requests with probability
    c / (n - 1), a little more than random order's 1 / n for one odd answer. None below 3 answers
    (no switch that stays fits in two).
    """
    if n < 3:
        return None
    return min(1.0, c / (n - 1))


def requests_for_transient(m: int = 1, c: int = 1, alpha: float = ALPHA, series: int = 1) -> int:
    """Answers per series needed before m odd answers on the c cold requests, repeated in `series`
    series, can be told from chance: from random order alone for one series, and for two or more
    also from one switch placed at random in each (`switch_at_start_p`)."""
    n = max(c, m, 2)
    while ((math.comb(c, m) / math.comb(n, m)) ** series > alpha
           or (series >= 2 and (switch_at_start_p(n, c) or 1.0) ** series > alpha)):
        n += 1
    return n


def undetermined_transient_text(shape: str, p: float, n: int, c: int) -> str:
    need = requests_for_transient(1, c)
    return (f"{shape.replace('cold-start transient: ', '')}; but at {n} answers random order puts the odd "
            f"answer(s) there {p:.0%} of the time: not enough to call it a cold-start transient "
            f"({need} answers would tell)")


def max_logprob_diff(groups: Sequence[Sequence[Sample]]) -> float | None:
    """Largest logprob difference between requests that gave the same answer (same tokens).

    Each request is compared with the first request of its answer group; requests without
    logprobs are skipped. 0.0: every repeat of each answer came with the same logprobs.
    """
    diffs = [d for g in groups for s in g[1:]
             if (d := prefix_logprob_diff(g[0], s)) is not None]
    return max(diffs) if diffs else None


def analyse(samples: Sequence[Sample], cold_count: int = 1, preview_chars: int = 160,
            process_cold: bool = True) -> PromptAnalysis:
    """Distinct answers, modal share, lengths, divergences, cold/warm and pattern of one series.

    `cold_count` is how many requests were sent before any other had finished (1 when one at a
    time; the concurrency when several clients sent the first wave together). `process_cold`
    says whether the first of them was the first request the runtime served since it started.
    """
    by = _compared_by(samples)
    ordered = sorted(samples, key=lambda s: s.index)
    ok = [s for s in ordered if s.ok]
    groups = group_answers(ordered, by)
    answers = [
        DistinctAnswer(rank=r, count=len(g), share=len(g) / len(ok), first_index=g[0].index,
                       indices=[s.index for s in g], n_tokens=g[0].n_tokens,
                       text_preview=g[0].text[:preview_chars], text=g[0].text, token_ids=g[0].token_ids,
                       logprobs=g[0].logprobs, truncated=sum(1 for s in g if s.truncated))
        for r, g in enumerate(groups)
    ]
    divergences = [divergence(groups[0][0], g[0], r, len(g), by) for r, g in enumerate(groups) if r > 0]
    tied = len(groups) > 1 and len(groups[0]) == len(groups[1])
    cold_warm = None
    first_indices: list[int] = []
    if ordered:
        first_indices = [s.index for s in ordered[:max(1, cold_count)]]
        cold = [s for s in ordered if s.index in first_indices]
        warm = [s for s in ok if s.index not in first_indices]
        modal_key = answer_key(groups[0][0], by) if groups and not tied else None
        warm_keys = {answer_key(s, by) for s in warm}
        cold_ok = [s for s in cold if s.ok]
        cold_warm = ColdWarm(
            cold_indices=first_indices,
            cold_is_modal=(all(answer_key(s, by) == modal_key for s in cold_ok)
                           if cold_ok and modal_key is not None else None),
            cold_in_warm=(all(answer_key(s, by) in warm_keys for s in cold_ok) if cold_ok and warm else None),
            warm_distinct=len(warm_keys),
            warm_count=len(warm),
            modal_tied=tied,
            process_cold=process_cold,
        )
    pattern, pattern_text = series_pattern(ok, by, first_indices, process_cold)
    if pattern == "stable" and unseen_share_bound(len(ok)) is None:
        pattern, pattern_text = "undetermined", (
            f"one answer in {len(ok)}: too few to bound how common another answer could be "
            f"({launches_for_bound()} alike answers would bound it below {alike_bound(launches_for_bound()):.0%})")
    cold_p = None
    if pattern == "cold-transient":
        cold_p = cold_transient_p(ok, by, first_indices)
        if cold_p is not None and cold_p > ALPHA:
            pattern, pattern_text = "undetermined", undetermined_transient_text(pattern_text, cold_p, len(ok),
                                                                                 len(first_indices))
    with_ids = all(s.ids_or_empty() is not None for s in ok) and bool(ok)
    by_text = len({s.text for s in ok})
    by_ids = len({tuple(s.ids_or_empty() or ()) for s in ok}) if with_ids else None
    return PromptAnalysis(
        compared_by=by,
        requests=len(ordered),
        answered=len(ok),
        errors=len(ordered) - len(ok),
        empty_answers=sum(1 for s in ok if s.text == ""),  # nothing a reader would see
        distinct_answers=len(groups),
        distinct_by_text=by_text,
        distinct_by_ids=by_ids,
        ids_text_disagree=by_ids is not None and by_ids != by_text,
        modal_share=(len(groups[0]) / len(ok)) if ok else None,
        modal_tied=tied,
        lengths=(lc := length_counts(ordered)),
        lengths_text=format_lengths(lc),
        truncated=sum(1 for s in ok if s.truncated),
        answers=answers,
        divergences=divergences,
        cold_warm=cold_warm,
        pattern=pattern,
        pattern_text=pattern_text,
        cold_transient_p=cold_p,
        max_logprob_diff=max_logprob_diff(groups),
        unseen_share_bound=unseen_share_bound(len(ok)) if len(groups) == 1 else None,
    )


# -- across launches ------------------------------------------------------------------------------

def _pair_counts(groups: Sequence[Sequence[Hashable]]) -> tuple[list[list[int]], list[int]]:
    """For launches i < j: how many of their answer pairs are identical; and each launch's size."""
    counts = [Counter(g) for g in groups]
    agree = [[0] * len(groups) for _ in groups]
    for i in range(len(groups)):
        for j in range(i + 1, len(groups)):
            small, large = (counts[i], counts[j]) if len(counts[i]) <= len(counts[j]) else (counts[j], counts[i])
            agree[i][j] = agree[j][i] = sum(c * large.get(k, 0) for k, c in small.items())
    return agree, [len(g) for g in groups]


def across_agreement(groups: Sequence[Sequence[Hashable]]) -> float | None:
    """Share of answer pairs from two different launches that are identical (None: no such pair)."""
    agree, sizes = _pair_counts(groups)
    a = t = 0
    for i in range(len(groups)):
        for j in range(i + 1, len(groups)):
            a += agree[i][j]
            t += sizes[i] * sizes[j]
    return a / t if t else None


def launch_logprob_gaps(modal_samples: Sequence[Sample]) -> tuple[float | None, bool]:
    """Logprob gaps between launches' modal answers, every pair of launches (not only against the first).

    Returns the largest |logprob difference| over the tokens two launches' modal answers share,
    over every pair, and whether some pair gave the same tokens with logprobs further apart than
    `LOGPROB_TOLERANCE` (numerical drift without a changed answer).
    """
    diffs: list[float] = []
    apart = False
    for i in range(len(modal_samples)):
        for j in range(i + 1, len(modal_samples)):
            a, b = modal_samples[i], modal_samples[j]
            d = prefix_logprob_diff(a, b)
            if d is None:
                continue
            diffs.append(d)
            if a.ids_or_empty() is not None and a.ids_or_empty() == b.ids_or_empty() and d > LOGPROB_TOLERANCE:
                apart = True
    return (max(diffs) if diffs else None), apart


def within_agreement(groups: Sequence[Sequence[Hashable]]) -> float | None:
    """Share of answer pairs inside one launch that are identical (None: no launch has two answers)."""
    a = t = 0
    for g in groups:
        n = len(g)
        t += n * (n - 1) // 2
        a += sum(c * (c - 1) // 2 for c in Counter(g).values())
    return a / t if t else None


def jackknife_over_launches(groups: Sequence[Sequence[Hashable]], level: float = CONFIDENCE) -> tuple[float, float] | None:
    """Jackknife t-interval of the across-launch agreement, leaving out one launch at a time.

    agreement +/- t(K-1) * SE_jackknife, clipped to [0, 1]; the unit is the launch (session), so
    what varies between launches widens it and the answers inside one launch do not count as
    independent. None with fewer than three answering launches.
    """
    groups = [g for g in groups if g]
    k = len(groups)
    if k < 3:
        return None
    agree, sizes = _pair_counts(groups)
    total_a = sum(agree[i][j] for i in range(k) for j in range(i + 1, k))
    total_s = sum(sizes)
    total_t = sum(sizes[i] * sizes[j] for i in range(k) for j in range(i + 1, k))
    if not total_t:
        return None
    theta = total_a / total_t
    loo = []
    for i in range(k):
        t_i = total_t - sizes[i] * (total_s - sizes[i])
        a_i = total_a - sum(agree[i][j] for j in range(k) if j != i)
        loo.append(a_i / t_i if t_i else theta)
    m = math.fsum(loo) / k
    se = math.sqrt((k - 1) / k * math.fsum((x - m) ** 2 for x in loo))
    half = t_quantile(1.0 - (1.0 - level) / 2.0, k - 1) * se
    return max(0.0, theta - half), min(1.0, theta + half)


def pooled_projection(groups: Sequence[Sequence[Hashable]], level: float = CONFIDENCE) -> tuple[float, float] | None:
    """The agreement's range over an exact interval of the pooled answer shares (answers as draws).

    Two answers: agreement = 1 - 2p(1 - p) for the other answer's share p, taken over its
    Clopper-Pearson interval; more answers: m^2 <= agreement <= m^2 + (1 - m)^2 for the modal
    share m over its interval. Where the answers vary within launches this catches what a
    leave-one-launch-out interval misses near an even split (agreement is flat there); it is
    joined with that interval, never used alone.
    """
    counts = Counter(a for g in groups for a in g)
    n = sum(counts.values())
    if n == 0:
        return None
    ordered = counts.most_common()
    if len(ordered) == 1:
        return None
    if len(ordered) == 2:
        ci = clopper_pearson(ordered[1][1], n, level)
        assert ci is not None
        lo_p, hi_p = ci
        f = lambda p: 1.0 - 2.0 * p * (1.0 - p)  # noqa: E731
        low = f(min(max(0.5, lo_p), hi_p))  # the minimum of f over [lo_p, hi_p]
        return min(low, f(lo_p), f(hi_p)), max(f(lo_p), f(hi_p))
    ci = clopper_pearson(ordered[0][1], n, level)
    assert ci is not None
    lo_m, hi_m = ci
    g = lambda m: m * m + (1.0 - m) ** 2  # noqa: E731
    return lo_m * lo_m, max(g(lo_m), g(hi_m))


def agreement_interval(groups: Sequence[Sequence[Hashable]], level: float = CONFIDENCE) -> tuple[float, float] | None:
    """The across-launch agreement's interval: the jackknife over launches joined with two exact
    projections, of the pooled answers and of the launches' modal answers (one per launch).

    Each covers where another may not: the jackknife, variation between launches; the pooled
    answers, an even split inside launches (agreement is flat there, and the jackknife narrow);
    the launches' modal answers, an even split of whole launches (every leave-one-out value equal,
    a zero-width jackknife). Chosen by benchmarks/bench_calibration.py.
    """
    groups = [g for g in groups if g]
    jack = jackknife_over_launches(groups, level)
    if jack is None:
        return None
    lo, hi = jack
    modal = [[Counter(g).most_common(1)[0][0]] for g in groups]
    for proj in (pooled_projection(groups, level), pooled_projection(modal, level)):
        if proj is not None:
            lo, hi = min(lo, proj[0]), max(hi, proj[1])
    return lo, hi


def alike_bound(k: int, confidence: float = UNSEEN_CONFIDENCE) -> float | None:
    """What K launches that all gave the same answers bound: the share d of starts giving another.

    The chance that K launches agree when a launch differs with probability d (two behaviours) is
    (1 - d)^K + d^K; the bound is the d where that falls to 1 - confidence (about 40 % at K = 6,
    12 % at K = 24). None where even d = 50 % would leave K launches alike too often (K < 6).
    """
    miss = 1.0 - confidence
    if k < 1 or 2 * 0.5 ** k > miss:
        return None
    lo, hi = 0.0, 0.5
    for _ in range(100):
        mid = (lo + hi) / 2
        if (1 - mid) ** k + mid ** k > miss:
            lo = mid
        else:
            hi = mid
    return hi


def launches_for_bound(confidence: float = UNSEEN_CONFIDENCE) -> int:
    return next(k for k in range(1, 100) if alike_bound(k, confidence) is not None)


def alike_launches_text(k: int, truncated: int, n_answers: int, *, unit: str = "launch", units: str = "launches",
                        alike_what: str = "the same answer sequence") -> tuple[str, bool | None]:
    """The sentence for K fresh processes (launches; a study's sessions) that all gave the same
    answers, and whether it says they are consistent (True) or cannot (None: answers cut at the
    cap, or too few processes to bound how often one would differ)."""
    bound = alike_bound(k)
    if bound is not None and truncated:
        # what came back is alike, but it stopped at max_tokens: a difference past the cap is unseen
        return (f"{k} of {k} {units} alike up to the cap ({truncated} of {n_answers} answers cut at max_tokens: "
                f"they may differ past it); before the cap, a {unit} that differs in more than {bound:.0%} of "
                "starts would likely have shown"), None
    if bound is not None:
        return (f"{k} of {k} {units} alike ({alike_what}): a {unit} that differs in more than "
                f"{bound:.0%} of starts would likely have shown"), True
    return (f"{k} of {k} {units} alike, too few to bound how often a {unit} differs: "
            f"{launches_for_bound()} alike {units} would bound it below {alike_bound(launches_for_bound()):.0%}"), None


def _table_seed(groups: Sequence[Sequence[Hashable]], seed: int = 0) -> int:
    """A seed from a launch x answer table: launch sizes and per-launch counts of each answer, the
    answers in order of first appearance (what they are does not enter, only how they fall)."""
    import hashlib

    order: dict[Hashable, int] = {}
    for g in groups:
        for a in g:
            order.setdefault(a, len(order))
    table = [sorted(Counter(order[a] for a in g).items()) for g in groups]
    digest = hashlib.sha256(repr((seed, table)).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def launch_permutation_p(groups: Sequence[Sequence[Hashable]], permutations: int = PERMUTATIONS, seed: int = 0,
                         stop_after: int = 20) -> float | None:
    """Permutation test over launch labels: do the launches' answer distributions differ?

    The statistic is the chi-square of the launch x answer table (as sum n_ia^2 / (n_i n_a), which
    orders tables alike when the margins are fixed); each permutation deals the pooled answers
    back to launches of the same sizes. Monte Carlo with the sequential stop of Besag and Clifford
    (stop once `stop_after` permutations reach the observed statistic: p = stop_after / drawn; else
    (exceeding + 1) / (drawn + 1)), a valid p-value either way; once the exceedances so far put the
    p-value below ALPHA with 99.9 % certainty it stops there too (the verdict would not change; the
    p shown is then the Monte Carlo estimate at that point). None with fewer than two answering
    launches; 1.0 when every answer is the same.

    The permutations are drawn from a stream seeded by the observed table (its launch sizes and
    per-launch answer counts, with `seed`): the same answers always give the same p, and tables of
    one design do not share one set of permutations. A Monte Carlo test is at its level only on
    average over its random permutations; with one fixed seed, every table of the same size and
    minority count was judged against the same few hundred permutations, whose own 95th percentile
    sits a percentage point or more off the true one: on one set of 2,000 tables of 6 launches x
    200 requests with no difference between launches, seeds 0-3 rejected 3.7-6.2 % where 20 % of
    requests failed and 5.4-8.0 % where none did. Failed requests only moved the tables onto
    another such set (the answered totals differ from K x N): seed 0 said "NOT consistent" in 6.0 %
    of 10,000 runs there. Seeded by the table, the rate is the test's own (4.4 % on fresh tables of
    that design, beside 4.2 % for 20,000 permutations each).
    """
    groups = [list(g) for g in groups if g]
    k = len(groups)
    if k < 2:
        return None
    pooled = Counter(a for g in groups for a in g)
    if len(pooled) < 2:
        return 1.0
    sizes = [len(g) for g in groups]
    total = sum(sizes)
    background, _ = pooled.most_common(1)[0]
    others = [a for a, c in pooled.items() if a != background for _ in range(c)]
    ends = []
    acc = 0
    for n in sizes:
        acc += n
        ends.append(acc)
    col = dict(pooled)

    def statistic(cells: dict[tuple[int, Hashable], int]) -> float:
        per_launch_other = [0] * k
        value = 0.0
        for (i, a), c in cells.items():
            per_launch_other[i] += c
            value += c * c / (sizes[i] * col[a])
        for i in range(k):
            b = sizes[i] - per_launch_other[i]
            value += b * b / (sizes[i] * col[background])
        return value

    observed_cells: Counter = Counter()
    for i, g in enumerate(groups):
        for a in g:
            if a != background:
                observed_cells[(i, a)] += 1
    observed = statistic(observed_cells) - 1e-9
    rng = random.Random(_table_seed(groups, seed))
    from bisect import bisect_right

    exceed = 0
    for drawn in range(1, permutations + 1):
        cells: Counter = Counter()
        for pos, a in zip(rng.sample(range(total), len(others)), others, strict=True):
            cells[(bisect_right(ends, pos), a)] += 1
        if statistic(cells) >= observed:
            exceed += 1
            if exceed >= stop_after:
                return exceed / drawn
        if drawn % 50 == 0 and drawn >= 100:
            # clearly below the level: the exact permutation p is under ALPHA with 99.9 % certainty
            # (Clopper-Pearson on the exceedances so far); more permutations would not change the verdict
            upper = clopper_pearson(exceed, drawn, 0.998)
            if upper is not None and upper[1] < ALPHA:
                return (exceed + 1) / (drawn + 1)
    return (exceed + 1) / (permutations + 1)


def order_p(groups: Sequence[Sequence[Hashable]], permutations: int = 999, seed: int = 0) -> float | None:
    """Do answers persist inside a launch (fewer changes from one request to the next than random
    order gives)? A permutation test stratified by launch: each launch's answers are shuffled within
    it, the statistic is the number of adjacent changes summed over launches, one-sided (fewer).

    The launch test (`launch_permutation_p`) deals answers to launches as if the order inside a
    launch did not matter; where answers come in runs (a state that sticks for several requests),
    launches of the same law differ by far more than that test allows, and it says "differ" almost
    always. A small p here says the order inside launches is not random. None where no launch has
    two answers and three requests (nothing to test)."""
    groups = [list(g) for g in groups]
    testable = [g for g in groups if len(g) >= 3 and len(set(g)) > 1]
    if not testable:
        return None

    def changes(gs: Sequence[Sequence[Hashable]]) -> int:
        return sum(1 for g in gs for a, b in pairwise(g) if a != b)

    observed = changes(testable)
    rng = random.Random(_table_seed(testable, seed + 7))
    at_most = 0
    for _ in range(permutations):
        shuffled = [rng.sample(g, len(g)) for g in testable]
        if changes(shuffled) <= observed:
            at_most += 1
    return (at_most + 1) / (permutations + 1)


def order_floor(groups: Sequence[Sequence[Hashable]], permutations: int = 999) -> float | None:
    """The smallest p the order test (`order_p`) could give on these launches: the chance, under
    random order inside each launch, that every launch which varied shows its fewest possible
    changes (one block per answer: m! * prod(c!) / n! for a launch of n answers, m distinct with
    counts c), never below the Monte Carlo floor 1 / (permutations + 1). Above ALPHA, the order
    test cannot see answers that persist however strongly they do (a launch whose one odd answer
    came last reads the same in random order and in a persisting state), so a launch difference
    cannot be told from persistence. None where no launch varied inside (nothing to test)."""
    testable = [list(g) for g in groups if len(g) >= 3 and len(set(g)) > 1]
    if not testable:
        return None
    log_p = 0.0
    for g in testable:
        counts = Counter(g).values()
        log_p += (math.lgamma(len(counts) + 1) + sum(math.lgamma(c + 1) for c in counts)
                  - math.lgamma(len(g) + 1))
    return max(math.exp(log_p), 1.0 / (permutations + 1))


AcrossWord = Literal["alike", "alike up to the cap", "differ", "differ or persist", "no detectable difference",
                     "too few", "undetermined", "order inside launches"]


# Below this many answers a launch, the order test inside launches has little power: answers that
# persist for several requests read as a launch effect (the claim says so).
ORDER_TEST_MIN_ANSWERS = 20


def across_of(k: int, alike: bool, truncated: int, n_answers: int, perm_p: float | None,
              adjusted_p: float | None, family: int, order: float | None,
              switched: int = 0, per_launch: int | None = None,
              floor: float | None = 0.0) -> tuple[AcrossWord, bool | None, str]:
    """The across-launch verdict of one prompt: its word, whether it says the launches are consistent
    (True), not (False) or neither (None), and its sentence.

    `adjusted_p` is the launch test's p corrected for the family of prompts tested together (Holm;
    `family` of them); "differ" needs it at most ALPHA and answers in random order inside each
    launch (`order` above ALPHA) and no launch whose own pattern is a switch (`switched`: launches
    whose answer changed once and stayed): where they persist, the test's assumption fails and the
    page says that the order inside launches may explain the difference instead. With few requests
    a launch the order test cannot see persistence (5 requests: answers that keep the previous one
    half the time made launches of one law "differ" in 29-50 % of runs); a switch is that
    persistence seen in one launch. `floor` is the order test's smallest attainable p
    (`order_floor`; None where no launch varied inside): above ALPHA it could not have seen
    persistence, so "differ" is not said there either (answers that keep one state for a whole
    launch, the same law in every launch, made six launches of 20 "differ" in 11 % of runs)."""
    if k < 2:
        return "undetermined", None, f"undetermined: {k} launch(es) answered"
    if alike:
        text, consistent = alike_launches_text(k, truncated, n_answers)
        bound = alike_bound(k)
        return ("alike up to the cap" if bound is not None and truncated else
                "alike" if bound is not None else "too few"), consistent, text
    p = adjusted_p if adjusted_p is not None else perm_p
    corrected = (f", Holm-adjusted over the {family} prompts tested together (raw p = {perm_p:.2g})"
                 if family > 1 and perm_p is not None else "")
    shown = f"{p:.3g}" if p is not None else "—"
    if p is not None and p <= ALPHA and ((order is not None and order <= ALPHA) or switched):
        seen = "; ".join(x for x in (
            f"order test p = {order:.2g}" if order is not None else "",
            f"{switched} of {k} launches switched answer once and kept it" if switched else "") if x)
        return "order inside launches", None, (
            f"the launches' answers differ by a test that takes the order inside a launch as random "
            f"(p = {shown}{corrected}, {k} launches), but inside the launches answers persist from one request to "
            f"the next ({seen}): the order inside launches may explain the difference")
    if p is not None and p <= ALPHA and per_launch is not None and per_launch < ORDER_TEST_MIN_ANSWERS:
        # the launch test takes the order inside a launch as random; with few answers a launch the
        # order test cannot check that, and answers that persist for several requests (the same law in
        # every launch) give the same data as launches that differ: the claim says both
        return "differ or persist", None, (
            f"the launches' answers differ beyond what random order inside a launch gives (permutation test over "
            f"launch labels, p = {shown}{corrected}, {k} launches), but {per_launch} answers a launch cannot tell "
            f"launches that differ from answers that persist for several requests inside a launch "
            f"({ORDER_TEST_MIN_ANSWERS} a launch would tell): either way, the same request does not get the same "
            "answer from one start to the next")
    if p is not None and p <= ALPHA and (floor is None or floor > ALPHA):
        why = ("no launch varied inside" if floor is None else
               f"the launches that varied inside did so too little for the order test to see persistence "
               f"(its smallest attainable p is {floor:.2g})")
        return "differ or persist", None, (
            f"the launches' answers differ beyond what random order inside a launch gives (permutation test over "
            f"launch labels, p = {shown}{corrected}, {k} launches), but {why}: launches that differ cannot be told "
            "from answers that keep one state for a whole launch; either way, the same request does not get the "
            "same answer from one start to the next")
    if p is not None and p <= ALPHA:
        return "differ", False, (f"the launches differ beyond chance inside a launch (permutation test over launch "
                                 f"labels, p = {shown}{corrected}, {k} launches)")
    return "no detectable difference", None, (
        f"no detectable difference between launches (permutation test over launch labels, "
        f"p = {p:.2g}{corrected}, {k} launches)" if p is not None else
        f"no detectable difference between launches ({k} launches)")


class LaunchFigures(BaseModel):
    """One launch's own figures (shown when there are too few launches for an interval)."""

    index: int
    answered: int
    distinct: int
    modal_answer: int | None  # rank of its modal answer among all launches' answers (0 = most common)
    pattern: Pattern


class LaunchPair(BaseModel):
    a: int
    b: int
    agreement: float | None


class LaunchesAnalysis(BaseModel):
    compared_by: str
    launches: int
    within_distinct: list[int]  # per launch
    across_distinct: int  # over all launches' answers together
    modal_per_launch_distinct: int  # how many different modal answers the launches had
    agreement: float | None  # across launches: pairs of answers from two different launches
    agreement_ci95: tuple[float, float] | None
    ci_note: str | None = None  # why there is no interval
    ci_method: str | None = None  # how the interval was made
    within_agreement: float | None = None  # pairs of answers inside one launch that are identical
    # Every launch gave the same answer sequence: how common a differing launch could be and still
    # likely be missed (None: fewer than `launches_for_bound()` launches, too few to bound it).
    alike_bound: float | None = None
    # The permutation test over launch labels: a small p says the launches' answers differ beyond
    # what chance inside a launch gives.
    permutation_p: float | None = None
    # Every launch gave one answer (each its own): an answer more common than this per request
    # would likely have shown in the K*N answers.
    unseen_bound: float | None = None
    # Where every launch that varied did so only at its first request(s): the joint chance of that
    # under random order (product over those launches); None otherwise.
    cold_transient_p: float | None = None
    # The same under one switch that stays, placed at random in each of those launches (product of
    # `switch_at_start_p`), and how many launches showed the shape: from two on, the within-launch
    # verdict names a transient only where both chances are at most ALPHA.
    cold_switch_p: float | None = None
    cold_series: int = 0
    across: AcrossWord = "undetermined"
    across_text: str = ""
    # The order test inside launches (`order_p`): small where answers persist from one request to
    # the next, which the launch test does not allow for. Run only where the launch test rejects (else None).
    order_p: float | None = None
    # The smallest p the order test could give on these launches (`order_floor`; None: no launch
    # varied inside): above ALPHA, persistence could not have been seen.
    order_floor: float | None = None
    # How many answers each launch gave at least: the per-launch bound below rests on it.
    min_answers_per_launch: int = 0
    lengths_text: str
    errors: int
    answers_per_launch: list[int] = Field(default_factory=list)
    per_launch: list[LaunchFigures] = Field(default_factory=list)
    pairs: list[LaunchPair] = Field(default_factory=list)
    same_sequence: bool | None = None  # request i gave the same answer in every launch, for every i
    same_answers: bool | None = None  # every launch gave the same set of answers with the same modal one
    # True: every launch gave the same sequence, enough of them to bound a differing launch;
    # False: the permutation test says the launches differ; None: neither.
    consistent_across: bool | None = None
    stable_within: bool | None = None  # every launch gave one answer
    within_patterns: list[Pattern] = Field(default_factory=list)
    # Largest logprob difference between launches' modal answers over their shared tokens, and
    # whether two launches gave the same tokens with logprobs apart by more than the tolerance.
    across_logprob_diff: float | None = None
    same_tokens_logprobs_apart: bool = False


def analyse_launches(launches: Sequence[Sequence[Sample]], resamples: int = 2000, seed: int = 0,
                     cold_count: int = 1) -> LaunchesAnalysis:
    """Within-launch stability and across-launch consistency of one prompt, kept apart.

    `resamples` is kept for callers of the bootstrap era; the interval is now the jackknife's.
    """
    flat = [s for launch in launches for s in launch]
    by = _compared_by(flat)
    ordered = [sorted(launch, key=lambda s: s.index) for launch in launches]
    keyed = [[answer_key(s, by) for s in launch if s.ok] for launch in ordered]
    # answers ranked over all launches: most frequent first, ties by first appearance
    pooled_counts: Counter = Counter()
    first_seen: dict[Hashable, int] = {}
    for n, key in enumerate(answer_key(s, by) for launch in ordered for s in launch if s.ok):
        pooled_counts[key] += 1
        first_seen.setdefault(key, n)
    rank_of = {key: r for r, key in enumerate(sorted(pooled_counts, key=lambda x: (-pooled_counts[x], first_seen[x])))}
    per_launch: list[LaunchFigures] = []
    modal_keys: list[Hashable] = []
    modal_samples: list[Sample] = []
    for i, launch in enumerate(ordered):
        groups = group_answers(launch, by)
        ok = [s for s in launch if s.ok]
        first = [s.index for s in launch[:max(1, cold_count)]]
        pattern, _ = series_pattern(ok, by, first)
        if groups:
            modal_keys.append(answer_key(groups[0][0], by))
            modal_samples.append(groups[0][0])
        per_launch.append(LaunchFigures(index=i, answered=len(ok), distinct=len(groups),
                                        modal_answer=rank_of.get(answer_key(groups[0][0], by)) if groups else None,
                                        pattern=pattern))
    answering = [k for k in keyed if k]
    agree, sizes = _pair_counts(keyed)
    pairs = [LaunchPair(a=i, b=j, agreement=(agree[i][j] / (sizes[i] * sizes[j]) if sizes[i] and sizes[j] else None))
             for i in range(len(keyed)) for j in range(i + 1, len(keyed))]
    enough = len(answering) >= 2
    sequences = [[(s.ok, answer_key(s, by) if s.ok else None) for s in launch] for launch in ordered if any(
        s.ok for s in launch)]
    same_sequence = all(seq == sequences[0] for seq in sequences) if enough else None
    same_answers = (len(set(modal_keys)) == 1 and all(set(k) == set(answering[0]) for k in answering)
                    if enough else None)
    k = len(answering)
    # alike: at every request position the launches that answered gave one answer (a failed
    # request is missing, not different)
    by_position: dict[int, set] = {}
    for launch in ordered:
        for pos, smp in enumerate(launch):
            if smp.ok:
                by_position.setdefault(pos, set()).add(answer_key(smp, by))
    alike = enough and all(len(v) == 1 for v in by_position.values())
    n_answers = sum(len(kk) for kk in answering)
    truncated = sum(1 for s in flat if s.ok and s.truncated)
    bound = alike_bound(k) if alike else None
    perm_p = launch_permutation_p(keyed, seed=seed) if enough and not alike else None
    ci, note, method = None, None, None
    if not enough:
        note = f"no agreement: {k} launch(es) answered, comparing launches needs two"
    elif alike:
        note = "no interval: every launch gave the same answers, which bounds how often one would differ"
    elif k >= MIN_LAUNCHES_FOR_CI:
        ci, method = agreement_interval(keyed), "jackknife over launches with exact projections"
    else:
        note = (f"inconclusive: {k} launches answered; an interval over launches needs at least "
                f"{MIN_LAUNCHES_FOR_CI}; per-launch figures instead")
    # the order test decides only where the launch test rejects (a family's adjusted p is never below
    # the raw one): run it there alone, its 999 shuffles per prompt being most of the analysis's time
    order = (order_p(keyed, seed=seed) if enough and not alike and perm_p is not None and perm_p <= ALPHA
             else None)
    switched = sum(1 for f in per_launch if f.pattern == "switch")
    floor = order_floor(keyed) if enough and not alike else None
    across, consistent, text = across_of(k, alike, truncated, n_answers, perm_p, perm_p, 1, order, switched,
                                         min((len(kk) for kk in answering), default=None), floor)
    stable_each = all(len(set(kk)) <= 1 for kk in answering) if answering else None
    cold_ps = []
    switch_ps = []
    for launch in ordered:
        ok = [s for s in launch if s.ok]
        first = [s.index for s in launch[:max(1, cold_count)]]
        if len({answer_key(s, by) for s in ok}) > 1:
            cold_ps.append(cold_transient_p(ok, by, first))
            switch_ps.append(switch_at_start_p(len(ok), sum(1 for s in ok if s.index in first)))
    cold_p = joint_p(cold_ps)
    shaped = cold_p is not None
    cold_switch = joint_p(switch_ps) if cold_p is not None else None
    across_diff, apart = launch_logprob_gaps(modal_samples)
    return LaunchesAnalysis(
        compared_by=by,
        launches=len(launches),
        within_distinct=[len(set(k)) for k in keyed],
        across_distinct=len({k for ks in keyed for k in ks}),
        modal_per_launch_distinct=len(set(modal_keys)),
        agreement=across_agreement(keyed),
        agreement_ci95=ci,
        ci_note=note,
        ci_method=method,
        within_agreement=within_agreement(keyed),
        alike_bound=bound,
        permutation_p=perm_p,
        # per launch, not pooled: each launch's own n bounds what it could have missed
        unseen_bound=unseen_share_bound(min(len(kk) for kk in answering)) if stable_each and answering else None,
        order_p=order,
        order_floor=floor,
        min_answers_per_launch=min((len(kk) for kk in answering), default=0),
        cold_transient_p=cold_p,
        cold_switch_p=cold_switch,
        cold_series=len(cold_ps) if shaped else 0,
        across=across,
        across_text=text,
        lengths_text=format_lengths(length_counts(flat)),
        errors=sum(1 for s in flat if not s.ok),
        answers_per_launch=[len(k) for k in keyed],
        per_launch=per_launch,
        pairs=pairs,
        same_sequence=same_sequence,
        same_answers=same_answers,
        consistent_across=consistent,
        stable_within=stable_each,
        within_patterns=[p.pattern for p in per_launch],
        across_logprob_diff=across_diff,
        same_tokens_logprobs_apart=apart,
    )


# -- runs over a prompt set, sessions x replicates (study 2) ------------------------------------

RunMeasure = Literal["identical runs", "items", "tokens"]
# What each measure is, as the pages name it.
RUN_MEASURE_LABELS: dict[str, str] = {
    "identical runs": "identical runs (share of run pairs whose output hash, over every prompt, is the same)",
    "items": "item-level (share of prompts answered identically in a pair of runs)",
    "tokens": ("token-level (share of token positions before the first difference, of the longer answer, "
               "averaged over prompts)"),
}


def token_agreement(a: Sample, b: Sample, compared_by: str) -> float:
    """Share of positions two answers share before they part, of the longer one (1.0: identical).

    By token ids where `compared_by` is token_ids and both carry them, else by characters. Two
    empty answers are identical (1.0).
    """
    ia, ib = a.ids_or_empty(), b.ids_or_empty()
    x: Sequence = ia if compared_by == "token_ids" and ia is not None and ib is not None else a.text
    y: Sequence = ib if compared_by == "token_ids" and ia is not None and ib is not None else b.text
    longest = max(len(x), len(y))
    return 1.0 if longest == 0 else first_diff(x, y) / longest


class RunAgreement(BaseModel):
    """One agreement measure between runs: across sessions (with its interval) and within them."""

    measure: RunMeasure
    label: str  # what the figure is, for the page
    across: float | None  # over pairs of runs from two different sessions
    across_ci95: tuple[float, float] | None = None  # 95% interval over sessions (see analyse_runs)
    ci_note: str | None = None  # why there is no interval
    across_pairs: int = 0
    within: float | None = None  # over pairs of runs of one session
    within_pairs: int = 0


class RunsAnalysis(BaseModel):
    """A configuration's runs (one run = one pass over the prompt set), grouped by session."""

    compared_by: str
    items: int  # prompts in the set
    sessions: int  # sessions with at least one complete run
    runs: int  # complete runs (every prompt answered)
    incomplete_runs: int = 0  # runs with a failed prompt: no output hash, compared item by item only
    distinct_runs: int  # distinct output hashes over the complete runs
    truncated: int = 0  # answers over all runs that stopped at max_tokens
    agreements: list[RunAgreement] = Field(default_factory=list)
    first_run_differs: int = 0  # sessions whose first run's hash differs from all of its later runs
    distinct_after_first: int | None = None  # distinct hashes once each session's first run is left out
    # The first run of a session is the only difference: leaving each session's first run out
    # leaves one output hash (the caching transient the study separates).
    transient_only: bool = False

    def agreement(self, measure: RunMeasure) -> RunAgreement | None:
        return next((a for a in self.agreements if a.measure == measure), None)


def run_hash(run: dict[str, Sample], items: Sequence[str], compared_by: str) -> str | None:
    """The output hash of one run: every prompt's answer, in prompt order (None: a prompt failed)."""
    import hashlib

    if any(pid not in run or not run[pid].ok for pid in items):
        return None
    h = hashlib.sha256()
    for pid in items:
        h.update(repr((pid, answer_key(run[pid], compared_by))).encode())
    return h.hexdigest()


def _pair_measures(a: dict[str, Sample], b: dict[str, Sample], items: Sequence[str], by: str,
                   ha: str | None, hb: str | None) -> dict[RunMeasure, float | None]:
    both = [pid for pid in items if pid in a and pid in b and a[pid].ok and b[pid].ok]
    return {
        "identical runs": None if ha is None or hb is None else float(ha == hb),
        "items": (sum(answer_key(a[p], by) == answer_key(b[p], by) for p in both) / len(both)) if both else None,
        "tokens": (sum(token_agreement(a[p], b[p], by) for p in both) / len(both)) if both else None,
    }


def jackknife_pair_sums(sums: list[list[float]], counts: list[list[int]],
                        level: float = CONFIDENCE) -> tuple[float, float] | None:
    """Jackknife t-interval of a pooled between-group mean, leaving out one group (session) at a time.

    `sums[i][j]` / `counts[i][j]` (i != j): the measure summed over the pairs of units of groups
    i and j, and how many pairs. The estimate pools every pair of units from two different groups;
    each leave-one-out value pools the pairs that do not involve the group left out; the interval is
    estimate +/- t(K-1) * SE, clipped to [0, 1], SE the larger of the delete-one and the delete-two
    jackknife's (the latter where sessions split evenly into camps). A percentile bootstrap over groups
    covered 83 % of the time at 8 sessions when every prompt varied a little run by run (a pooled
    pair mean is a U-statistic: resampling groups, and never pairing a group with itself, leaves
    out part of its variance). Alone it covered 89 % at 12 sessions and 92 % at 24 where one prompt in
    ten varied 10 % of the time (a few rare differing answers, which leaving sessions out sees as
    next to no variance); `analyse_runs` joins it with `count_projection`. None with fewer than
    three groups.
    """
    k = len(sums)
    if k < 3:
        return None
    total_s = math.fsum(sums[i][j] for i in range(k) for j in range(i + 1, k))
    total_n = sum(counts[i][j] for i in range(k) for j in range(i + 1, k))
    if not total_n:
        return None
    theta = total_s / total_n
    row_n = [sum(counts[i][j] for j in range(k) if j != i) for i in range(k)]
    row_s = [math.fsum(sums[i][j] for j in range(k) if j != i) for i in range(k)]
    loo = [(total_s - row_s[i]) / (total_n - row_n[i]) if total_n - row_n[i] else theta for i in range(k)]
    m = math.fsum(loo) / k
    se = math.sqrt((k - 1) / k * math.fsum((x - m) ** 2 for x in loo))
    # Leaving out two at a time as well: sessions split evenly into two camps make every
    # leave-one-out value equal (a zero-width interval); pairs of sessions left out do not.
    lto = []
    for i in range(k):
        for j in range(i + 1, k):
            n_ij = total_n - row_n[i] - row_n[j] + counts[i][j]
            if n_ij:
                lto.append((total_s - row_s[i] - row_s[j] + sums[i][j]) / n_ij)
    if len(lto) > 1:
        m2 = math.fsum(lto) / len(lto)
        se = max(se, math.sqrt((k - 2) / (2 * len(lto)) * math.fsum((x - m2) ** 2 for x in lto)))
    half = t_quantile(1.0 - (1.0 - level) / 2.0, k - 1) * se
    return max(0.0, theta - half), min(1.0, theta + half)


def count_projection(estimate: float, unlike: int, answers: int,
                     level: float = CONFIDENCE) -> tuple[float, float] | None:
    """An agreement's range over the exact interval of how many answers were unlike the rest.

    `unlike` of `answers` (prompt x run answers) differ from their prompt's modal answer. Near the
    ceiling the disagreement 1 - `estimate` is, to first order, proportional to the share of such
    answers (each pairs, unlike, with the modal answers of the other sessions), and that count of
    rare independent events is what an interval from leaving sessions out misjudges: one differing
    answer among 36 runs leaves eleven of twelve sessions alike. The disagreement is scaled by the
    Clopper-Pearson interval of the count over the count seen (farther from the ceiling the
    disagreement grows less than in proportion, so the scaled upper end still bounds it). Joined
    with the jackknife, never used alone (it takes the runs as independent, which a session-level
    difference is not). None without an unlike answer.
    """
    if unlike <= 0 or answers <= 0 or unlike > answers:
        return None
    ci = clopper_pearson(unlike, answers, level)
    assert ci is not None
    share = unlike / answers
    d = 1.0 - estimate
    return max(0.0, 1.0 - d * ci[1] / share), min(1.0, 1.0 - d * ci[0] / share)


def unlike_answers(sessions: Sequence[Sequence[dict[str, Sample]]], items: Sequence[str], by: str) -> tuple[int, int]:
    """Over every prompt: answers unlike the prompt's modal answer, and answers (failed ones left out)."""
    unlike = total = 0
    for pid in items:
        keys = Counter(answer_key(run[pid], by) for s in sessions for run in s if pid in run and run[pid].ok)
        n = sum(keys.values())
        if n:
            total += n
            unlike += n - keys.most_common(1)[0][1]
    return unlike, total


def unlike_sessions(sessions: Sequence[Sequence[dict[str, Sample]]], items: Sequence[str], by: str) -> tuple[int, int]:
    """Sessions whose answer to some prompt, in most of their runs, is unlike the prompt's modal
    answer over every session; and the sessions."""
    modal: dict[str, Hashable] = {}
    for pid in items:
        keys = Counter(answer_key(run[pid], by) for s in sessions for run in s if pid in run and run[pid].ok)
        if keys:
            modal[pid] = keys.most_common(1)[0][0]
    unlike = 0
    for s in sessions:
        for pid in items:
            own = [answer_key(run[pid], by) for run in s if pid in run and run[pid].ok]
            if own and 2 * sum(1 for k in own if k != modal.get(pid)) > len(own):
                unlike += 1
                break
    return unlike, len(sessions)


def analyse_runs(sessions: Sequence[Sequence[dict[str, Sample]]], items: Sequence[str] | None = None,
                 resamples: int = 2000, seed: int = 0) -> RunsAnalysis:
    """Study 2's unit: a run is one pass over the prompt set; its output hash covers every answer.

    `sessions[s][r]` is run r (replicate order) of session s: prompt id -> that run's answer.
    Between runs of different sessions: identical-run agreement (same output hash),
    item-level agreement (share of prompts answered identically, over prompts both runs
    answered) and token-level agreement (share of positions before the first difference, of
    the longer answer, averaged over prompts); each pooled over run pairs, with a 95% interval
    over sessions from `MIN_LAUNCHES_FOR_CI` answering sessions on: for identical runs the
    launches' `agreement_interval` over output hashes, for the graded measures
    `jackknife_pair_sums` joined with `count_projection` (chosen by benchmarks/bench_calibration.py,
    family `runs`). Within
    sessions the same three measures over pairs of runs of one session. A run with a failed
    prompt has no output hash (counted apart); it still enters the item and token measures.
    """
    items = list(items) if items is not None else sorted({pid for s in sessions for run in s for pid in run})
    flat = [run[pid] for s in sessions for run in s for pid in items if pid in run]
    by = _compared_by(flat)
    answering = [list(s) for s in sessions if any(any(x.ok for x in run.values()) for run in s)]
    hashes = [[run_hash(run, items, by) for run in s] for s in answering]
    complete = [h for hs in hashes for h in hs if h is not None]
    k = len(answering)
    measures: list[RunMeasure] = ["identical runs", "items", "tokens"]
    sums = {m: [[0.0] * k for _ in range(k)] for m in measures}
    counts = {m: [[0] * k for _ in range(k)] for m in measures}
    within_sum = {m: 0.0 for m in measures}
    within_n = {m: 0 for m in measures}
    for i in range(k):
        for ri, a in enumerate(answering[i]):
            for rj in range(ri + 1, len(answering[i])):
                for m, v in _pair_measures(a, answering[i][rj], items, by, hashes[i][ri], hashes[i][rj]).items():
                    if v is not None:
                        within_sum[m] += v
                        within_n[m] += 1
        for j in range(i + 1, k):
            for ri, a in enumerate(answering[i]):
                for rj, b in enumerate(answering[j]):
                    for m, v in _pair_measures(a, b, items, by, hashes[i][ri], hashes[j][rj]).items():
                        if v is not None:
                            sums[m][i][j] += v
                            sums[m][j][i] += v
                            counts[m][i][j] += 1
                            counts[m][j][i] += 1
    agreements: list[RunAgreement] = []
    unlike = unlike_answers(answering, items, by)
    sessions_unlike = unlike_sessions(answering, items, by)
    for m in measures:
        total = sum(counts[m][i][j] for i in range(k) for j in range(i + 1, k))
        across = (sum(sums[m][i][j] for i in range(k) for j in range(i + 1, k)) / total) if total else None
        ci, note = None, None
        if across is None:
            note = f"no pair of runs from two sessions to compare ({k} session(s) answered)"
        elif k < MIN_LAUNCHES_FOR_CI:
            note = (f"no interval: {k} sessions answered, an interval over sessions needs at least "
                    f"{MIN_LAUNCHES_FOR_CI}")
        elif across in (0.0, 1.0):
            # Every pair alike (or every pair different): leaving sessions out cannot vary it, so an
            # interval would say nothing.
            note = (f"no interval: every one of the {total} pairs of runs from two sessions "
                    f"{'agrees' if across == 1.0 else 'differs'}, leaving sessions out cannot vary that")
        else:
            # identical runs is the agreement of output hashes: the launches' interval (the jackknife
            # joined with exact projections, for splits inside and between sessions); the graded
            # measures, the jackknife of their pooled pair means joined with the exact interval of
            # the count of unlike answers (near the ceiling)
            if m == "identical runs":
                ci = agreement_interval([[h for h in hs if h is not None] for hs in hashes])
            else:
                ci = jackknife_pair_sums(sums[m], counts[m])
                # the count of unlike answers, and of sessions unlike the rest: a session-level
                # difference is one event per session, not one per answer, so its count is the
                # sessions' (family runs: items and tokens covered 0.71-0.88 with the answers' alone)
                for proj in (count_projection(across, *unlike), count_projection(across, *sessions_unlike)):
                    if ci is not None and proj is not None:
                        ci = (min(ci[0], proj[0]), max(ci[1], proj[1]))
        agreements.append(RunAgreement(
            measure=m, label=RUN_MEASURE_LABELS[m], across=across, across_ci95=ci, ci_note=note,
            across_pairs=total, within=(within_sum[m] / within_n[m]) if within_n[m] else None,
            within_pairs=within_n[m]))
    # The first run of each session apart from its later runs (a transient confined to it).
    first_differs = 0
    later: set[str] = set()
    for hs in hashes:
        rest = {h for h in hs[1:] if h is not None}
        later |= rest
        if hs and hs[0] is not None and rest and hs[0] not in rest:
            first_differs += 1
    return RunsAnalysis(
        compared_by=by, items=len(items), sessions=sum(1 for hs in hashes if any(h is not None for h in hs)),
        runs=len(complete), incomplete_runs=sum(1 for hs in hashes for h in hs if h is None),
        distinct_runs=len(set(complete)), truncated=sum(1 for s in flat if s.ok and s.truncated),
        agreements=agreements, first_run_differs=first_differs,
        distinct_after_first=len(later) if later else None,
        transient_only=first_differs > 0 and len(later) == 1 and len(set(complete)) > 1)

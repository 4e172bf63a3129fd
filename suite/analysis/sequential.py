"""Exact sequential tests for a control tried inside one launch: stop as soon as it is decided.

A control that can be applied per request (a cache reset before the request, a request field) is
tried in pairs inside one launch: one request with the control and one without, in an order drawn
at random for each pair. After a first request with the control (its answer is the reference),
each pair is one of

- `F` (for): the request with the control gave the reference answer and the one without did not;
- `U` (against): the request without it gave the reference answer and the one with it did not;
- `C` (concordant): both gave the reference answer, or both another.

With no effect of the control on the answer the two requests of a pair are exchangeable, so a
discordant pair is `F` or `U` with probability one half each, whatever the runtime does otherwise.

Two boundaries, each an exact group-sequential test with one look after every pair:

- **credit** (the control changes the answer): after the d-th discordant pair, stop where the
  binomial upper tail of its `F` count under one half is at most a constant nominal level `c`,
  chosen (by exact dynamic programming over every path of up to `max_pairs` discordant pairs) as
  the largest that keeps the chance of ever crossing, with no effect, at most `alpha` (Pocock's
  constant boundary, exact for this binomial walk).
- **rule out** (no effect of the stated size): the control removes at least a share `effect` of the
  default's odd answers. Among discordant pairs, a control that leaves the requests with it odd at
  (1 - effect) times the rate of those without it makes `F` at least 1 / (2 - effect) of them
  (2/3 for half; more where the odd rate is higher), whatever that rate is; with no discordant
  pair nothing was compared, and nothing is ruled out. The hypothesis is rejected after the d-th
  discordant pair where the binomial lower tail of the `F` count under 1 / (2 - effect) is at
  most a constant level chosen the same way. The effect is thus relative to how often the
  default varies (an odd answer in 5 % of requests removed counts as much as one in 50 %), in
  the unit the test counts (discordant pairs); a launch in which the requests without it never
  varied, or a control whose effect lasts into the next request (it makes the requests without
  it agree, never `U`), gives no discordant `U` pairs and cannot rule out the control.
  Stopping for credit first only lowers the chance of ruling out falsely.

The sequential p-value of a path is the chance, with no effect, of crossing the credit boundary
whose level is the smallest nominal p the path reached: valid (at most u with probability at most
u), so that a family of such rows can be corrected with Holm. `benchmarks/bench_time_to_verdict.py`
measures both error rates by simulation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

Outcome = Literal["F", "U", "C"]
Decision = Literal["credit", "rule-out", "continue", "undecided"]

MAX_PAIRS = 24  # pairs of requests a control's series may take on one prompt before it stops undecided
EFFECT = 0.5  # the stated size a row rules out: the control removes half the default's odd answers or more


def rule_out_share(effect: float) -> float:
    """The least share of `F` among discordant pairs of a control that removes a share `effect` of
    the default's odd answers (the limit where odd answers are rare; more where they are common)."""
    return 1.0 / (2.0 - effect)


def _upper(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return math.fsum(math.comb(n, x) * p ** x * (1 - p) ** (n - x) for x in range(k, n + 1))


def _lower(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p)."""
    return math.fsum(math.comb(n, x) * p ** x * (1 - p) ** (n - x) for x in range(0, k + 1))


def _crossing(c: float, looks: int, p: float, upper: bool) -> float:
    """The chance that a walk of `looks` Bernoulli(p) steps ever has a count whose binomial tail
    (upper under one half, or lower under p) is at most `c`, looking after every step."""
    alive = {0: 1.0}  # count -> probability of being here without having crossed
    crossed = 0.0
    for n in range(1, looks + 1):
        nxt: dict[int, float] = {}
        for k, w in alive.items():
            for step, q in ((1, p), (0, 1 - p)):
                nxt[k + step] = nxt.get(k + step, 0.0) + w * q
        alive = {}
        for k, w in nxt.items():
            tail = _upper(k, n, 0.5) if upper else _lower(k, n, p)
            if tail <= c:
                crossed += w
            else:
                alive[k] = w
    return crossed


@lru_cache(maxsize=256)
def nominal_level(alpha: float, looks: int, p: float = 0.5, upper: bool = True) -> float:
    """The largest constant nominal level whose boundary is crossed with probability at most
    `alpha` over `looks` looks (bisection on a monotone, step-valued function)."""
    lo, hi = 0.0, alpha
    if _crossing(hi, looks, p, upper) <= alpha:
        return hi
    for _ in range(60):
        mid = (lo + hi) / 2
        if _crossing(mid, looks, p, upper) <= alpha:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class SequentialResult:
    """Where a series of pairs stands: its decision, after how many pairs, its counts and p."""

    decision: Decision
    pairs: int  # pairs used (up to the stop)
    favourable: int  # F
    against: int  # U
    concordant: int  # C
    p_value: float | None  # the sequential p of the credit test (None: no discordant pair)
    level: float  # the row's level (alpha, corrected for the matrix's family)
    effect: float
    max_pairs: int

    @property
    def decided(self) -> bool:
        return self.decision in ("credit", "rule-out")


def decide(outcomes: list[Outcome], level: float, max_pairs: int = MAX_PAIRS,
           effect: float = EFFECT) -> SequentialResult:
    """Walk the pairs in order and stop at the first boundary crossed; `undecided` after
    `max_pairs` without a crossing, `continue` where fewer pairs than that have run."""
    c_credit = nominal_level(level, max_pairs, 0.5, True)
    share = rule_out_share(effect)
    c_out = nominal_level(level, max_pairs, share, False)
    f = u = cc = 0
    smallest = 1.0
    decision: Decision = "continue"
    n = 0
    for n, o in enumerate(outcomes[:max_pairs], start=1):  # noqa: B007 (n: the pairs used, after the loop)
        if o == "F":
            f += 1
        elif o == "U":
            u += 1
        else:
            cc += 1
        d = f + u
        if o != "C" and d:
            nominal = _upper(f, d, 0.5)
            smallest = min(smallest, nominal)
            if nominal <= c_credit:
                decision = "credit"
                break
            if _lower(f, d, share) <= c_out:  # only discordant pairs compare the two sides
                decision = "rule-out"
                break
    else:
        if n >= max_pairs:
            decision = "undecided"
    p = _crossing(smallest, max_pairs, 0.5, True) if (f + u) else None
    return SequentialResult(decision=decision, pairs=n, favourable=f, against=u, concordant=cc,
                            p_value=None if p is None else min(1.0, p), level=level, effect=effect,
                            max_pairs=max_pairs)


def fewest_pairs_to_credit(level: float, max_pairs: int = MAX_PAIRS) -> int | None:
    """Pairs, all for the control, that cross the credit boundary at `level` (None: never within
    `max_pairs`)."""
    for d in range(1, max_pairs + 1):
        if decide(["F"] * d, level, max_pairs).decision == "credit":
            return d
    return None

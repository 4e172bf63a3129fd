"""The process of elimination, a test, not a glance: each control row against the default row of
the same matrix on every prompt that varied (`row_test`: a one-sided Fisher's exact test of the
answers other than the modal one; over launches, `launches_for` of them a row, where the default's
odd answer is a cold-start transient; an exact sequential test of pairs for a control tried inside
one launch), a control's p the largest of its prompts' and corrected over the matrix's controls (Holm)
in `eliminate`, which credits a control or says why none is; `partial_credits` names a control
that brings back some prompts only, `recompute` makes the elimination again from a record's rows
with today's level, and `claims` (with each row's cost, `row_costs`) says what the stage found."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from suite.analysis.claims import Claim, Evidence, Family, run_caveats
from suite.analysis.repro import group_answers, unseen_share_bound
from suite.analysis.sequential import rule_out_share
from suite.analysis.stats import fisher_fewer_others, holm, requests_needed
from suite.definitions import COMBINE
from suite.stages.controls.result import (
    ELIMINATION_ALPHA,
    ControlMatrixResult,
    ControlVerdict,
    EliminationVerdict,
    LaunchCount,
    MatrixRow,
    RowTest,
)
from suite.stages.gate_models import GateResult, truncation_by_prompt

# Where the gate's variance is a cold-start transient (once per launch), each row is this many
# launches of a short gate: the transient in 3 of 3 default launches against 0 of 3 under a control
# is p = 1/C(6, 3) = 0.05, the fewest that can credit a control. Three requests per prompt per
# launch: the cold one and two after it, which must agree with each other.
TRANSIENT_LAUNCHES = 3
TRANSIENT_REQUESTS = 3
# A row of its own launches is credited only over this many launches with the control, each giving
# the one answer: an autotuner picks kernels by measured speed, so one launch's choice can be lucky.
MIN_CREDIT_LAUNCHES = 2


def launches_for(controls: int, alpha: float = ELIMINATION_ALPHA) -> int:
    """Launches per row a transient's matrix of `controls` controls needs for its corrected test to
    be able to credit one: the transient in L of L default launches against 0 of L under a control
    is p = 1 / C(2L, L), and Holm over the controls asks the smallest p to be at most alpha / controls
    (3 launches for one control, 4 for two to three, 5 for four to twelve)."""
    level = alpha / max(1, controls)
    launches = TRANSIENT_LAUNCHES
    while 1.0 / math.comb(2 * launches, launches) > level:
        launches += 1
    return launches


def _in_launch_test(t: RowTest, row: MatrixRow, pid: str, alpha: float) -> RowTest:
    """A control tried inside one launch on one prompt: its exact sequential test over the pairs."""
    series = row.in_launch[pid]
    res = series.result()
    t.unit = "pair"
    t.n, t.others = len(series.outcomes), res.against
    t.default_n, t.default_others = len(series.outcomes), res.favourable
    t.p_value = res.p_value if res.p_value is not None else 1.0
    t.stopped_early = series.stop in ("credit", "rule-out", "second-answer")
    head = (f"{row.configuration} on {pid}: in one launch, {len(series.outcomes)} pair"
            f"{'s' if len(series.outcomes) != 1 else ''} of requests with and without it in random order after a "
            f"first request without it and one with it{f' ({row.why})' if row.why else ''}: without it the answer differed from the "
            f"control's in {res.favourable}, the other way in {res.against}, alike in {res.concordant}")
    if series.stop == "failed":
        t.text = f"{head}; a request failed: {series.reason}"
        return t
    if series.with_distinct > 1:
        t.text = f"{head}; with it a second answer came (the series stopped there): not one answer"
        return t
    credited = res.decision == "credit" and t.p_value <= series.level
    t.credited = credited and t.p_value <= alpha
    seq = (f"exact sequential sign test at {series.level:.2g} over up to {series.max_pairs} pairs, "
           f"p = {t.p_value:.2g}")
    if credited:
        bound = unseen_share_bound(series.with_answers)
        seen = (f"a second answer with it in more than {bound:.0%} of requests would likely have shown" if bound
                else "too few to bound how often a second answer would come")
        t.text = (f"{head}; with it one answer in {series.with_answers} ({seen}): it changes the answer and brings "
                  f"it to one ({seq})")
    elif res.decision == "rule-out":
        t.text = (f"{head}: rules out that it removes {series.effect:.0%} or more of the default's odd answers "
                  f"(with it, the reference answer in at least {rule_out_share(series.effect):.0%} of the "
                  f"{res.favourable + res.against} discordant pairs; {seq})")
    else:
        t.text = f"{head}: undecided after {len(series.outcomes)} pairs ({seq})"
    return t


def modal_digest(token_ids: list[int] | None, text: str) -> str:
    """A launch's modal answer as a short digest: its token ids where it has them, else its text."""
    raw = json.dumps(token_ids) if token_ids is not None else "text:" + text
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


# The tests a control's claim rests on, by name.
TEST_FISHER = "one-sided Fisher's exact test against the default row"
TEST_PAIRS = "exact sequential sign test of pairs with and without it inside one launch"


def launch_counts(row: MatrixRow, pid: str) -> list[LaunchCount]:
    """Each launch of a row on one prompt: what its request lines gave (`per_launch`, set where the
    record is read with its lines), else what its gates kept (the first launch's and the next)."""
    if row.per_launch.get(pid):
        return row.per_launch[pid]
    out = []
    for gate in [row.gate, *row.more_gates]:
        prompt = next((p for p in (gate.prompts if gate else []) if p.prompt_id == pid), None)
        if prompt is None or not prompt.answers:
            continue
        top = prompt.answers[0]
        ids = top.token_ids if prompt.compared_by == "token_ids" else None
        out.append(LaunchCount(answered=prompt.answered, modal_count=top.count, modal=modal_digest(ids, top.text)))
    return out


def _counts(row: MatrixRow, pid: str) -> tuple[int, int, int]:
    """A row's answered requests, its answers other than their own launch's modal one, and how many
    different modal answers its launches gave. One launch: the answers other than the modal one. A
    row of several launches counts each request inside its launch, so that launches that differ from
    one another (a choice made at start-up) are not counted as variation one request at a time."""
    counts = launch_counts(row, pid)
    n = row.answered.get(pid, 0)
    if len(counts) < 2 or sum(c.answered for c in counts) != n:
        return n, n - row.modal_count.get(pid, n), 1
    return n, sum(c.answered - c.modal_count for c in counts), len({c.modal for c in counts})


def varies_inside(row: MatrixRow, pid: str) -> bool:
    """Whether a row gave a second answer inside one of its launches on this prompt."""
    return _counts(row, pid)[1] > 0


def row_test(row: MatrixRow, default: MatrixRow | None, pid: str, alpha: float = ELIMINATION_ALPHA) -> RowTest:
    """The control row against the default row on one prompt: Fisher's exact test of their
    other-than-modal answers, each counted inside its own launch, one-sided (the control has fewer),
    with the n of each row."""
    if pid in row.in_launch:
        return _in_launch_test(RowTest(prompt_id=pid, n=0, others=0, default_n=0, default_others=0),
                               row, pid, alpha)
    assert default is not None
    n, others, modes = _counts(row, pid)
    d_n, d_others, _ = _counts(default, pid)
    t = RowTest(prompt_id=pid, n=n, others=others, default_n=d_n, default_others=d_others, launch_answers=modes,
                stopped_early=row.sent.get(pid, n) < (row.gate.n_requests if row.gate else n))
    if n == 0 or d_n == 0:
        t.text = f"{row.configuration} on {pid}: no answer in {'the row' if n == 0 else 'the default row'}"
        return t
    if pid in row.cold_odd and pid in default.cold_odd:
        return _launches_test(t, row, default, alpha)
    if row.distinct.get(pid, 0) <= 1 and _pattern(default, pid) == "cold-transient":
        return _launch_test(t, row, default, alpha)
    t.p_value = fisher_fewer_others(others, n, d_others, d_n)
    if others > 0:
        t.text = (f"{row.configuration} on {pid}: a second answer after {row.sent.get(pid, n)} requests"
                  + (" (the row stopped there)" if t.stopped_early else
                     f" ({row.distinct.get(pid, 0)} distinct in {n}, {others} other than their launch's modal one)"))
        return t
    assert t.p_value is not None
    t.credited = t.p_value <= alpha and row.launches >= MIN_CREDIT_LAUNCHES
    over = f" over {row.launches} launches" if row.launches > 1 else " in one launch"
    one = (f"one answer inside each of {row.launches} launches ({n} requests), the launches answering {modes} "
           f"different ways (a choice made at start-up, not one request at a time)" if modes > 1 else
           f"one answer in {n}{over}")
    versus = (f"{one} against {d_others} other answer{'s' if d_others != 1 else ''} in {d_n} at "
              f"default (one-sided Fisher's exact test p = {t.p_value:.2g}")
    if t.p_value <= alpha and not t.credited:
        t.text = (f"{row.configuration} on {pid}: {versus} <= {alpha:g}), but a credit rests on "
                  f"{MIN_CREDIT_LAUNCHES} launches with the control (one launch's kernel choice can be lucky): "
                  "not credited")
        return t
    if t.credited:
        t.text = f"{row.configuration} on {pid}: {versus} <= {alpha:g})"
    else:
        t.needed = requests_needed(d_others / d_n, alpha) if d_others else None
        need = (f"about {t.needed} requests per row would tell" if t.needed else
                "the default row showed no other answer here, nothing to tell apart" if not d_others else
                "more requests than the suite would send would be needed")
        t.text = f"{row.configuration} on {pid}: {versus} > {alpha:g}): cannot tell; {need}"
    return t


def _prompt(row: MatrixRow, pid: str) -> Any | None:
    """The row's gate result for one prompt, if it ran."""
    return next((p for p in (row.gate.prompts if row.gate else []) if p.prompt_id == pid), None)


def _pattern(row: MatrixRow, pid: str) -> str | None:
    """How the row's answers to one prompt varied (suite.analysis.repro's pattern), if it ran."""
    prompt = _prompt(row, pid)
    return prompt.pattern if prompt is not None else None


def _launch_test(t: RowTest, row: MatrixRow, default: MatrixRow, alpha: float) -> RowTest:
    """A control against a default row whose odd answer is a cold-start transient.

    Such a difference comes once per launch (the first request of the prompt, before a cache
    holds it), however many requests follow: more requests per row cannot tell a control that
    removes it from chance, more launches can. The unit is the launch: each row is one launch,
    and the default's launch showed the transient. One-sided Fisher's exact test over launches.
    """
    t.unit = "launch"
    launches, d_launches = 1, 1
    t.p_value = fisher_fewer_others(0, launches, 1, d_launches)
    assert t.p_value is not None
    t.credited = t.p_value <= alpha
    versus = (f"one answer in {t.n}, where the default row's other answer is a cold-start transient (its first "
              f"request only, once per launch), so launches are the unit: 0 of {launches} launch with it against "
              f"1 of {d_launches} at default (one-sided Fisher's exact test p = {t.p_value:.2g}")
    if t.credited:
        t.text = f"{row.configuration} on {t.prompt_id}: {versus} <= {alpha:g})"
    else:
        t.needed = requests_needed(1.0, alpha)
        t.text = (f"{row.configuration} on {t.prompt_id}: {versus} > {alpha:g}): cannot tell; about {t.needed} "
                  f"launches per row would tell")
    return _with_cold_note(t, row, default)


def _with_cold_note(t: RowTest, row: MatrixRow, default: MatrixRow) -> RowTest:
    """What the answers are, not a test: where the control's every answer is the one the default's
    cold first request gave, not the one its later requests gave, the verdict says so."""
    if _same_as_cold(row, default, t.prompt_id):
        t.text += "; its one answer is the default row's first (cold) answer, not the later one"
    return t


def _same_as_cold(row: MatrixRow, default: MatrixRow, pid: str) -> bool:
    """Whether a one-answer row answered what the default row's cold first request answered."""
    def answers(r: MatrixRow) -> list[Any]:
        prompt = _prompt(r, pid)
        return list(prompt.answers) if prompt is not None else []

    mine, theirs = answers(row), answers(default)
    cold = next((a for a in theirs if a.first_index == 0 and a.rank > 0), None)
    if len(mine) != 1 or cold is None:
        return False
    if mine[0].token_ids is not None and cold.token_ids is not None:
        return mine[0].token_ids == cold.token_ids
    return mine[0].text == cold.text


def _launches_test(t: RowTest, row: MatrixRow, default: MatrixRow, alpha: float) -> RowTest:
    """A transient row against the default row, launch by launch: in how many launches did the
    prompt's first answer alone differ. One-sided Fisher's exact test over launches; credited
    only where the control's every launch gave one answer."""
    t.unit = "launch"
    mine, theirs = row.cold_odd[t.prompt_id], default.cold_odd[t.prompt_id]
    c, lc = sum(1 for x in mine if x), len(mine)
    d, ld = sum(1 for x in theirs if x), len(theirs)
    t.n, t.others, t.default_n, t.default_others = lc, c, ld, d
    unit = "launch" if lc == 1 else "launches"
    head = (f"{row.configuration} on {t.prompt_id}: the first answer alone differed in {c} of {lc} {unit} "
            f"against {d} of {ld} at default (a cold-start transient comes once per launch: launches are the unit")
    if any(x is None for x in mine):
        t.text = f"{head}); the requests after the first differed among themselves in a launch: not one answer"
        return t
    t.p_value = fisher_fewer_others(c, lc, d, ld)
    assert t.p_value is not None
    t.credited = c == 0 and t.p_value <= alpha
    versus = f"{head}; one-sided Fisher's exact test p = {t.p_value:.2g}"
    if t.credited:
        t.text = f"{versus} <= {alpha:g})"
    elif not d:
        t.text = f"{versus} > {alpha:g}): the default showed no transient in its launches, nothing to tell apart"
    else:
        t.needed = requests_needed(d / ld, alpha)
        t.text = (f"{versus} > {alpha:g}): cannot tell"
                  + (f"; about {t.needed} launches per row would tell" if t.needed else ""))
    return _with_cold_note(t, row, default) if c == 0 else t


def eliminate(result: ControlMatrixResult, gate: GateResult | None) -> None:
    """Which control, if any, brings the prompts that varied back to one answer each, by a test.

    Credited: the control's row gave one answer on every prompt that varied and, on each, fewer
    other-than-modal answers than the same matrix's default row by a one-sided Fisher's exact test
    (each prompt must pass: the control's p is the largest of its prompts', an intersection-union
    test that needs no correction for requiring all), and that p, corrected over the matrix's
    controls (Holm: the family is every control row that ran), at most `result.alpha`. With six
    controls of no effect, crediting each at 5 % named one falsely in 7.3 % of matrices; corrected,
    at most 5 %. A control that passes alone but not over the family is named as such.
    """
    default = next((r for r in result.rows if r.configuration == "default" and r.status == "ok"), None)
    if gate is not None:
        spread = [p.prompt_id for p in gate.prompts if p.distinct_answers > 1]
    elif default is not None:
        spread = [pid for pid, d in default.distinct.items() if d > 1]
    else:
        spread = []
    result.spread_prompts = spread
    if not spread:
        result.elimination = "the answers did not vary: nothing to eliminate"
        return
    tried = [r for r in result.rows if r.configuration != "default" and r.status == "ok"
             and not r.configuration.startswith("lora")]
    refused = [r.configuration for r in result.rows if r.status in ("refused", "failed")]
    unchanged = [r.configuration for r in result.rows if r.status == "unchanged"]
    tail = (f"; refused or failed: {', '.join(refused)}" if refused else "") + (
        f"; the switch changed no kernel, so nothing was tested: {', '.join(unchanged)}" if unchanged else "")
    if default is None and not any(r.in_launch for r in tried):
        result.restoring = []
        result.elimination = ("no default row ran in this matrix: a control can only be credited against it"
                              + tail)
        return
    d_text = ", ".join(
        f"{pid}: first answer alone different in {sum(1 for x in default.cold_odd[pid] if x)} of "
        f"{len(default.cold_odd[pid])} launches" if pid in default.cold_odd else
        f"{pid} {default.distinct.get(pid, 0)} distinct in {default.answered.get(pid, 0)}"
        for pid in spread) if default is not None else ""
    for r in tried:
        if default is None and not r.in_launch:
            continue
        r.tests = [row_test(r, default, pid, result.alpha) for pid in spread if pid in r.answered]
        whole = len(r.tests) == len(spread) and all(t.p_value is not None for t in r.tests)
        r.p_value = max(t.p_value for t in r.tests if t.p_value is not None) if whole else None
    # the controls of the matrix are one family: Holm over their tests
    # a control the matrix planned but did not start (the cause was found inside one launch) stays
    # in the family, as a test that found nothing (p = 1)
    unstarted = [r for r in result.rows if r.status == "skipped" and (r.reason or "").startswith("not started")]
    adjusted = holm([r.p_value for r in tried] + [1.0] * len(unstarted))
    result.family, result.correction = len(tried) + len(unstarted), "Holm"
    for r, a in zip(tried, adjusted[:len(tried)], strict=True):
        r.p_adjusted = a
    result.restoring = [r.configuration for r in tried
                        if len(r.tests) == len(spread) and all(t.credited for t in r.tests)
                        and r.p_adjusted is not None and r.p_adjusted <= result.alpha]
    family = (f"{result.family} control{'s' if result.family != 1 else ''} tested, Holm"
              if result.family > 1 else "1 control tested")
    tests = ([f"one-sided Fisher's exact test against the default row ({d_text})"] if default is not None and any(
        not r.in_launch for r in tried) else []) + (
        ["exact sequential sign tests of pairs inside one launch"] if any(r.in_launch for r in tried) else [])
    how = f"{' and '.join(tests) or 'no test'} at {result.alpha:g} over the matrix ({family})"
    if result.restoring:
        lines = "; ".join(t.text for r in tried if r.configuration in result.restoring for t in r.tests)
        for r in tried:
            if r.configuration not in result.restoring:
                continue
            cut = truncation_by_prompt(r.gate)
            capped = [pid for pid in spread if pid in cut and cut[pid][0] and cut[pid][0] >= r.answered.get(pid, 0)]
            if capped:
                tail = (f"; up to the cap: every answer of {r.configuration} on {', '.join(capped)} was cut at "
                        f"{cut[capped[0]][1]} tokens, answers may differ past it") + tail
        adj = ", ".join(f"{r.configuration} p = {r.p_adjusted:.2g}" for r in tried
                        if r.configuration in result.restoring and r.p_adjusted is not None)
        inside = [r.configuration for r in tried if r.configuration in result.restoring and r.starts_differ]
        left = (f"; under {', '.join(inside)} the launches answered differently from one another: what is left is "
                "chosen at start-up (the restarts stage tells launches apart)") if inside else ""
        result.elimination = (f"{', '.join(result.restoring)} bring(s) {', '.join(spread)} back to one answer"
                              f"{' inside each launch' if inside else ''} ({lines}; {how}: adjusted {adj}){left}{tail}")
    else:
        near = [r for r in tried if len(r.tests) == len(spread) and all(t.credited for t in r.tests)]
        held = ("; " + ", ".join(f"{r.configuration} passes on its own (p = {r.p_value:.2g}) but not over the "
                                 f"{len(tried)} controls (Holm-adjusted p = {r.p_adjusted:.2g})"
                                 for r in near if r.p_value is not None and r.p_adjusted is not None)
                if near else "")
        lines = "; ".join(t.text for r in tried for t in r.tests)
        result.elimination = (f"no control of the {len(tried)} that ran is shown to bring {', '.join(spread)} back "
                              f"to one answer{partial_credits(tried, result.alpha, len(spread))}{held} "
                              f"({lines or 'no control row answered'}; {how}){tail}")


def partial_credits(tried: list[MatrixRow], alpha: float, prompts: int) -> str:
    """Where no control brings every prompt back: the controls that bring some prompt back on its
    own, named only where the test would hold over every prompt test of the matrix (Bonferroni:
    p <= alpha / tests), so that the chance of naming any by chance stays within alpha. Empty
    where there is none, or where the matrix varied on one prompt only (the verdict says it)."""
    tests = [t for r in tried for t in r.tests if t.p_value is not None]
    if prompts < 2 or not tests:
        return ""
    level = alpha / len(tests)
    named = [(r.configuration, t) for r in tried for t in r.tests
             if t.credited and t.p_value is not None and t.p_value <= level]
    if not named:
        return ""
    return ("; on a prompt of its own: " + ", ".join(f"{c} brings {t.prompt_id} back (p = {t.p_value:.2g})"
                                                    for c, t in named)
            + f", each p <= {alpha:g} / {len(tests)} (Bonferroni over the matrix's {len(tests)} prompt tests)")


def recompute(result: ControlMatrixResult, summary: Any = None) -> ControlMatrixResult:
    """The elimination made again from the rows' answers with today's test and correction; each
    in-launch series' stop made again from its pairs (a credit or a rule-out is the sequential
    test's decision over the pairs the record keeps, not the stop it stored); a stop the pairs do
    not hold (a second answer with the control, a failed request) stays."""
    again = result.model_copy(deep=True)
    again.alpha = ELIMINATION_ALPHA  # today's level, not the one the record was written with
    # the controls whose in-launch credit stopped the matrix when the run ended (the stops it stored)
    stopped_by = [r.configuration for r in result.rows
                  if r.in_launch and all(x.stop == "credit" for x in r.in_launch.values())]
    for row in again.rows:
        for series in row.in_launch.values():
            if series.stop in ("credit", "rule-out", "undecided"):
                decision = series.result().decision
                series.stop = decision if decision in ("credit", "rule-out") else "undecided"
    eliminate(again, getattr(summary, "gate", None))
    gone = [name for name in stopped_by if name not in again.restoring]
    for row in again.rows:
        # a row the run did not start because a control was credited inside one launch: where
        # today's test no longer credits that control, the reason says so (the row tested nothing)
        if row.status == "skipped" and (row.reason or "").startswith("not started") and gone:
            row.reason = (f"not started: when the run ended, {', '.join(gone)} was credited inside one launch; "
                          f"today's test does not credit it, so nothing was tested here "
                          f"(`--controls {row.configuration}` tries it)")
    return again


def row_costs(row: MatrixRow, default: MatrixRow | None) -> dict[str, float]:
    """A row's tokens/s and J/token against the default row's, where both rows sent the same
    requests per prompt (a row that stopped early has another mix of prompts: no ratio). A row
    tried inside one launch: its requests with the control against those without, the same prompts."""
    if row.in_launch:
        if row.tokens_per_s and row.paired_tokens_per_s:
            return {"tokens_per_s": row.tokens_per_s / row.paired_tokens_per_s}
        return {}
    if default is None or not same_mix(row.sent, default.sent):
        return {}
    out: dict[str, float] = {}
    if row.tokens_per_s and default.tokens_per_s:
        out["tokens_per_s"] = row.tokens_per_s / default.tokens_per_s
    if row.energy and default.energy and row.energy.j_per_token and default.energy.j_per_token:
        out["j_per_token"] = row.energy.j_per_token / default.energy.j_per_token
    return out


def same_mix(sent: dict[str, int], other: dict[str, int]) -> bool:
    """Whether two rows sent the same prompts in the same proportions (a row of two launches sends
    twice each prompt's requests: the same mix, so its rates compare)."""
    if not sent or not other:
        return sent == other  # neither row says what it sent: the old rule (equal, both empty)
    if set(sent) != set(other):
        return False
    first = next(iter(sent))
    return all(sent[k] * other[first] == other[k] * sent[first] for k in sent)


# At most this many combination rows a matrix adds (each is a launch, or two).
COMBINATIONS_MAX = 3


def combinations_to_try(result: ControlMatrixResult) -> list[str]:
    """Where no control of one kernel part brings the varying prompts back to one answer (none
    restores, or the one that does leaves the launches answering differently), the smallest
    combinations of the parts that moved the count: pairs of the kernel-part rows credited on some
    prompt (or restoring inside each launch only); with one such row, it with each other part tried.
    Named `a+b` (`RuntimeDefinition.parts`), at most COMBINATIONS_MAX, none already in the matrix.
    Nothing where no part moved: the page then says which parts were ruled out."""
    if any(not r.starts_differ for r in result.rows if r.configuration in result.restoring):
        return []
    parts = [r for r in result.rows if r.status == "ok" and r.part is not None and COMBINE not in r.part
             and not r.in_launch and r.configuration != "default"]
    moved = [r for r in parts if r.configuration in result.restoring or any(t.credited for t in r.tests)]
    if len(moved) >= 2:
        pairs = [(a, b) for i, a in enumerate(moved) for b in moved[i + 1:]]
    elif moved:
        pairs = [(moved[0], b) for b in parts if b is not moved[0]]
    else:
        return []
    have = {r.configuration for r in result.rows}
    names = [f"{a.configuration}+{b.configuration}" for a, b in pairs if a.part != b.part]
    return [n for n in names if n not in have][:COMBINATIONS_MAX]


PART_WORDS = {"moe": "the MoE layers' kernels", "linear": "the linear layers' kernels",
              "attention": "the attention kernels"}


def subject_of(row: MatrixRow, default: MatrixRow | None, summary: Any = None) -> str | None:
    """What a kernel-part control changes, in a user's words: the part, the kernels the default ran
    (the default row's own start-up, else the arm's) and the kernels the row ran."""
    if row.part is None:
        return None
    path = ((default.kernel_path if default is not None else None)
            or getattr(getattr(summary, "signature", None), "kernel_path", None) or {})
    said = []
    for part in row.part.split(COMBINE):  # a combination names each part it changes, together
        before, after = path.get(part), (row.kernel_path or {}).get(part)
        words = PART_WORDS.get(part, f"the {part} kernels")
        said.append(f"{words}{f' {before}' if before else ''}"
                    + (f", with it {after}" if after else f", switched ({row.configuration})"))
    return " together with ".join(said)


def _row_parts(r: MatrixRow, named: bool = False) -> dict[str, float]:
    """A row's p's as its sentences print them: each prompt's test, the row's own (the largest over
    its prompts) and its Holm-adjusted p over the matrix (`named`: each keyed by the row too)."""
    at = f"{r.configuration} " if named else ""
    parts = {f"{at}on {t.prompt_id}": t.p_value for t in r.tests if t.p_value is not None}
    if r.p_value is not None:
        parts[f"{at}over its prompts".strip()] = r.p_value
    if r.p_adjusted is not None:
        parts[f"{at}Holm over the controls".strip()] = r.p_adjusted
    return parts


def claims(result: ControlMatrixResult, summary: Any) -> list[Claim]:
    """The elimination (what restores one answer, if anything) and one claim per control row
    tested, each with its p, its Holm-adjusted p over the matrix's controls and its cost."""
    arm, run_id, extra = getattr(summary, "arm", ""), getattr(summary, "run_id", ""), run_caveats(summary, "controls")
    default = next((r for r in result.rows if r.configuration == "default" and r.status == "ok"), None)
    tried = [r for r in result.rows if r.configuration != "default" and not r.configuration.startswith("lora")]
    family = (Family(name="controls", size=result.family, correction="Holm", alpha=result.alpha)
              if result.family > 1 else None)
    unit = "launches" if result.launches_per_row > 1 else "requests"
    out: list[Claim] = []
    for r in tried:
        verdict: ControlVerdict
        if r.status != "ok":
            verdict, good = r.status, None
        elif r.answered and not any(r.answered.values()):
            verdict, good = "every request failed", None
        elif r.configuration in result.restoring:
            verdict, good = (("restores one answer inside each launch" if r.starts_differ else "restores one answer"),
                             True)
        elif r.tests and all(t.credited for t in r.tests):
            verdict, good = "passes alone, not over the matrix", None
        elif any(varies_inside(r, pid) for pid in result.spread_prompts if pid in r.answered):
            verdict, good = "still varies", False
        elif r.in_launch and all(s.stop == "rule-out" for s in r.in_launch.values()):
            verdict, good = "no effect of the stated size", False
        else:
            verdict, good = "not shown", None
        cut = sum(t.n for t in r.tests)
        row_unit = ("pairs inside one launch" if r.in_launch else
                    "launches" if any(t.unit == "launch" for t in r.tests) else
                    "requests, each against its own launch's answer" if r.launches > 1 else "requests")
        test = TEST_PAIRS if r.in_launch else TEST_FISHER
        out.append(Claim(stage="controls", kind="control", arm=arm, run_id=run_id, configuration=r.configuration,
                         prompt=", ".join(result.spread_prompts) or None, verdict=verdict, good=good,
                         counts={"answered": sum(r.answered.values()), "launches": r.launches,
                                 "requests": sum(r.sent.values()),
                                 "launch_answers": max((t.launch_answers for t in r.tests), default=1)},
                         # the control's p: the largest of its prompts' (where a prompt's test gave
                         # none, the largest of those that did: the p its sentence can print)
                         evidence=Evidence(test=test, n=cut or None, unit=row_unit,
                                           p=r.p_value if r.p_value is not None else
                                           max((t.p_value for t in r.tests if t.p_value is not None), default=None),
                                           p_adjusted=r.p_adjusted, parts=_row_parts(r)),
                         family=family, cost=row_costs(r, default), subject=subject_of(r, default, summary),
                         caveats=[f"every answer on {pid} cut at {cap} tokens: answers may differ past the cap"
                                  for pid, (n_cut, cap) in truncation_by_prompt(r.gate).items()
                                  if pid in result.spread_prompts and n_cut and n_cut >= r.answered.get(pid, 0)]
                         + list(extra),
                         phrase=f"{r.configuration}: {verdict}",
                         text="; ".join(t.text for t in r.tests) or (r.reason or verdict)))
    word: EliminationVerdict
    phrase = ""
    if not result.spread_prompts:
        word, good = "nothing to eliminate", None
    elif result.restoring:
        word, good = result.restores_word, True
        phrase = f"{', '.join(result.restoring)} {word}"
    elif default is None:
        word, good = "no default row", None
    else:
        word, good = "nothing tested restores one answer", False
    # the evidence is the test that decided: the restoring rows' (pairs inside one launch, or the
    # Fisher test against the default row), else every row that was tested; its p is theirs
    deciding = [r for r in tried if r.configuration in result.restoring] or [r for r in tried if r.tests]
    pairs, rows = any(r.in_launch for r in deciding), any(not r.in_launch for r in deciding)
    test = " and ".join(([TEST_FISHER] if rows or not pairs else []) + ([TEST_PAIRS] if pairs else []))
    out.insert(0, Claim(stage="controls", kind="elimination", arm=arm, run_id=run_id,
                        prompt=", ".join(result.spread_prompts) or None, verdict=word, good=good,
                        configuration=", ".join(result.restoring) or None,
                        counts={"controls": sum(1 for r in tried if r.status == "ok"), "planned": len(tried),
                                "launches_per_row": result.launches_per_row},
                        evidence=Evidence(test=test, unit=("pairs inside one launch" if pairs and not rows else unit),
                                          n=sum(t.n for r in deciding for t in r.tests) or None,
                                          p_adjusted=min((r.p_adjusted for r in deciding if r.p_adjusted is not None),
                                                         default=None),
                                          # the sentence gives every row's tests: their p's by row and prompt
                                          parts={k: v for r in tried for k, v in _row_parts(r, named=True).items()}),
                        family=family, caveats=list(extra), phrase=phrase or word, text=result.elimination))
    return out


def from_lines(result: ControlMatrixResult, lines: list[Any]) -> tuple[ControlMatrixResult, list[str]]:
    """The matrix's rows checked against the run's request lines: per row run as its own launches
    (the default's and each control's) and prompt, its distinct answers, answered requests and
    modal count made from the lines of that row (every launch of it pooled). A row whose lines say
    otherwise takes the lines' counts (the elimination is then made again from them), and each
    disagreement is named. Rows tried inside one launch (pairs), a cold-start transient's rows
    (their counts are per launch: the first answer against the rest) and rows without lines keep
    what the summary holds."""
    by_row: dict[tuple[str, str], list[Any]] = {}
    for q in lines:
        if getattr(q, "kind", None) == "controls":
            by_row.setdefault((q.label, q.prompt_id), []).append(q)
    if not by_row:
        return result, []
    again = result.model_copy(deep=True)
    said: list[str] = []
    for row in again.rows:
        if row.status != "ok" or row.in_launch or row.cold_odd:
            continue  # pairs inside one launch, and a transient's launches (counted per launch), stay as kept
        for pid in list(row.distinct):
            qs = by_row.get((row.configuration, pid))
            if not qs:
                continue
            row.per_launch[pid] = [_launch_count(launch) for launch in split_launches(qs)]
            groups = group_answers([q.sample() for q in qs])
            d, n, modal = len(groups), sum(len(g) for g in groups), (len(groups[0]) if groups else 0)
            if (d, n) == (row.distinct.get(pid), row.answered.get(pid)) and modal == row.modal_count.get(pid, modal):
                continue
            said.append(f"{row.configuration} on {pid}: the summary kept {row.distinct.get(pid)} distinct of "
                        f"{row.answered.get(pid)} answered, its request lines say {d} distinct of {n}; the lines are used")
            row.distinct[pid], row.answered[pid] = d, n
            if pid in row.modal_count:
                row.modal_count[pid] = modal
    return again, said


def split_launches(lines: list[Any]) -> list[list[Any]]:
    """One row's request lines on one prompt, in the order written, cut into its launches: each
    launch numbers its requests from 0, so a launch begins where the number does not grow."""
    out: list[list[Any]] = []
    last: int | None = None
    for q in lines:
        index = getattr(q, "index", None)
        if not out or (index is not None and last is not None and index <= last):
            out.append([])
        out[-1].append(q)
        last = index
    return out


def _launch_count(lines: list[Any]) -> LaunchCount:
    """One launch's answered requests, its modal answer's count and key, from its request lines."""
    groups = group_answers([q.sample() for q in lines])
    if not groups:
        return LaunchCount(answered=0, modal_count=0, modal="")
    top = groups[0][0]
    ids = top.token_ids if all(s.token_ids is not None for g in groups for s in g) else None
    return LaunchCount(answered=sum(len(g) for g in groups), modal_count=len(groups[0]), modal=modal_digest(ids, top.text))


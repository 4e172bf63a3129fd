"""The gate's verdicts and what is computed from its result alone: the export's gate table (one row
per gate prompt), each prompt's pattern, test and bound made again from its answers with today's
rules (`recompute`), and the claims the first screen shows (per prompt, the cold-start transients
tested as one family over the prompts that varied). The result itself (`GateResult`) is
`suite.stages.gate_models`'s, the machinery that fills it `suite.stages.repeat`'s; nothing here
sends a request."""

from __future__ import annotations

from typing import Any, Literal, get_args

from suite.analysis.claims import Claim, Evidence, Family, caveat_cut, caveat_failed, run_caveats
from suite.analysis.levels import CONFIDENCE, percent
from suite.analysis.repro import ALPHA, Sample, analyse, answer_groups, unseen_share_bound
from suite.analysis.stats import closed_fisher
from suite.stages.base import ColumnType
from suite.stages.gate_models import GatePromptResult, GateResult, select_prompts, verdict_of


def export_rows(result: GateResult) -> list[dict[str, Any]]:
    """`suite export`'s gate table: one row per gate prompt: distinct answers, lengths, cold vs warm."""
    rows = []
    for p in result.prompts:
        cw = p.cold_warm
        rows.append({
            "prompt_id": p.prompt_id, "requests": p.requests, "answered": p.answered, "errors": p.errors,
            "distinct_answers": p.distinct_answers, "modal_share": p.modal_share,
            "answer_lengths_tokens": [lc.tokens for lc in p.lengths], "answer_length_counts": [lc.count for lc in p.lengths],
            "compared_by": p.compared_by,
            "truncated": p.truncated, "max_tokens": p.max_tokens, "modal_tied": p.modal_tied,
            "cold_is_modal": cw.cold_is_modal if cw else None, "warm_distinct": cw.warm_distinct if cw else None,
            "warm_count": cw.warm_count if cw else None,
        })
    return rows


# The fields of a prompt's analysis that today's rules make again from its answers (the pattern and
# its test, the bound); the rest (divergences, logprob margins) need what only the run saw.
RECOMPUTED_FIELDS = ("pattern", "pattern_text", "cold_transient_p", "unseen_share_bound", "distinct_answers",
                     "modal_share", "modal_tied")


def recompute_prompt(p: GatePromptResult) -> GatePromptResult:
    """One prompt's pattern, its test and bound made again from its answers (their request indices)."""
    samples = samples_of_prompt(p)
    if not samples:
        return p
    cold = p.cold_warm.cold_indices if p.cold_warm is not None else [0]
    process_cold = p.cold_warm.process_cold if p.cold_warm is not None else True
    again = analyse(samples, cold_count=max(1, len(cold)), process_cold=process_cold)
    return p.model_copy(update={f: getattr(again, f) for f in RECOMPUTED_FIELDS})


def samples_of_prompt(p: GatePromptResult) -> list[Sample]:
    """The prompt's requests rebuilt from its distinct answers (each answer at its indices)."""
    out = [Sample(index=i, text=a.text, token_ids=a.token_ids, completion_tokens=a.n_tokens,
                  finish_reason="length" if k < a.truncated else None)
           for a in p.answers for k, i in enumerate(a.indices)]
    out += [Sample(index=10_000 + k, error="failed") for k in range(p.errors)]
    return out


def recompute(result: GateResult, summary: Any) -> GateResult:
    """The gate's patterns and verdict made again from its prompts' answers with today's rules."""
    prompts = [recompute_prompt(p) for p in result.prompts]
    reproducible, verdict = verdict_of(prompts, result.stopped_reason, needed=result.n_requests or None)
    return result.model_copy(update={"prompts": prompts, "reproducible": reproducible, "verdict": verdict})


def from_lines(result: GateResult, lines: list[Any]) -> tuple[GateResult, list[str]]:
    """The gate's answers made from its request lines, the record of every request as it was sent
    and answered, and checked against the answers the summary kept: a prompt whose lines group
    otherwise (an answer edited, a request added or dropped) is rebuilt from its lines, and the
    disagreement named in one phrase each. A prompt with no line (a record written before the lines
    were kept) keeps its stored answers."""
    by_prompt: dict[str, list[Any]] = {}
    for q in lines:
        if getattr(q, "kind", None) == "gate" and getattr(q, "stage", "gate") in (None, "gate"):
            by_prompt.setdefault(q.prompt_id, []).append(q)
    return gate_from_prompt_lines(result, by_prompt)


def gate_from_prompt_lines(result: GateResult, by_prompt: dict[str, list[Any]]) -> tuple[GateResult, list[str]]:
    """`from_lines` for the lines of one series, already grouped by prompt: the gate's own, or one
    launch's short gate of the restarts (the launch's label picks its lines)."""
    if not by_prompt:
        return result, []
    prompts: list[GatePromptResult] = []
    said: list[str] = []
    for p in result.prompts:
        qs = sorted(by_prompt.get(p.prompt_id, []), key=lambda q: q.index)
        if not qs:
            prompts.append(p)
            continue
        process_cold = p.cold_warm.process_cold if p.cold_warm is not None else True
        a = analyse([q.sample() for q in qs], process_cold=process_cold)
        again = GatePromptResult.from_analysis(
            a, prompt_id=p.prompt_id, prompt_version=p.prompt_version, prompt_sha256=p.prompt_sha256, kind=p.kind,
            max_tokens=p.max_tokens, error_messages=list(dict.fromkeys(q.error for q in qs if q.error))[:5],
            prompt_tokens=sorted({q.prompt_tokens for q in qs if getattr(q, "prompt_tokens", None) is not None}))
        if answer_groups(again.answers) == answer_groups(p.answers) and again.errors == p.errors:
            prompts.append(p)  # the lines agree: the summary's richer prompt (divergences, margins) stays
            continue
        said.append(f"{p.prompt_id}: the summary kept {p.distinct_answers} distinct of {p.answered} answered, its "
                    f"request lines say {again.distinct_answers} distinct of {again.answered}; the lines are used")
        prompts.append(again)
    if not said:
        return result, []
    return result.model_copy(update={"prompts": prompts}), said


def gate_of_lines(label: str, qs: list[Any], prompts: list[str], n: int) -> GateResult:
    """A short gate made from its request lines alone (one label's, every prompt's full series): a
    matrix row or a restart launch its run finished before it stopped, rebuilt for the page. What
    request lines do not keep (start-up, energy, wall time) is absent, not guessed."""
    known = {p.id: p for p in select_prompts(None)}
    results = []
    for i, pid in enumerate(prompts):
        mine = sorted((q for q in qs if q.prompt_id == pid), key=lambda q: q.index)
        first = mine[0]
        a = analyse([q.sample() for q in mine], process_cold=i == 0)
        results.append(GatePromptResult.from_analysis(
            a, prompt_id=pid, prompt_version=getattr(first, "prompt_version", 1) or 1,
            prompt_sha256=getattr(first, "prompt_sha256", "") or "",
            kind=known[pid].kind if pid in known else "completion", max_tokens=first.max_tokens or 0,
            error_messages=list(dict.fromkeys(q.error for q in mine if q.error))[:5],
            prompt_tokens=sorted({q.prompt_tokens for q in mine if getattr(q, "prompt_tokens", None) is not None})))
    reproducible, verdict = verdict_of(results, None)
    head = qs[0]
    return GateResult(
        label=label, controls=list(getattr(head, "controls", None) or []), n_requests=n,
        concurrency=getattr(head, "concurrency", None) or 1,
        request_extra=dict(getattr(head, "request_extra", None) or {}), seed=head.seed,
        temperature=head.temperature or 0.0, logprobs=any(q.logprobs for q in qs), prompts=results,
        reproducible=reproducible, verdict=verdict, wall_s=0.0, http_s=round(sum(q.e2e_s or 0.0 for q in qs), 4))


# The gate claim's closed vocabulary: a word per pattern of the series, "undetermined" where too
# few answered, and "first request differs" where a transient does not hold over the varying prompts.
GateVerdict = Literal["one answer", "cold-start transient", "one switch that stays", "varies from request to request",
                      "undetermined", "first request differs"]
VERDICTS: dict[str, tuple[str, ...]] = {"gate": get_args(GateVerdict)}  # per claim kind (`Stage.verdicts`)
PATTERN_WORDS: dict[str, GateVerdict] = {
    "stable": "one answer", "cold-transient": "cold-start transient", "switch": "one switch that stays",
    "varies": "varies from request to request", "undetermined": "undetermined"}


def _pattern_text(p: GatePromptResult) -> str:
    """How the series varied, from its answers (not the sentence a record kept): for answers that
    vary, how many distinct and how many changes from one request to the next. No test of their
    order ran, so none is claimed."""
    if p.pattern != "varies":
        return p.pattern_text
    rank = {i: a.rank for a in p.answers for i in a.indices}
    order = [rank[i] for i in sorted(rank)]
    changes = sum(1 for a, b in zip(order, order[1:], strict=False) if a != b)
    if changes == 1 and order and order[-1] != order[-2]:
        return p.pattern_text  # only the last request differs: the analysis says so
    return (f"answers vary from request to request ({len(set(order))} distinct, {changes} changes in "
            f"{len(order)}; their order is not tested)")


def prompt_claim(p: GatePromptResult, arm: str, stage: str = "gate", configuration: str | None = None,
                 needed: int | None = None) -> Claim:
    """One prompt's series: how many distinct answers of those answered, its pattern, what it bounds.
    `needed`: the answers the series needed (the gate's requests per prompt): one answer in fewer
    is undetermined ("k of n answered"), never "the same answer"."""
    n, d = p.answered, p.distinct_answers
    word: GateVerdict = PATTERN_WORDS[p.pattern]
    short = d <= 1 and needed is not None and n < needed
    if n < 2 or short:
        word = "undetermined"
    # more than one distinct answer is a fact whatever its pattern: not the same answer twice
    good = None if n < 2 or short else d == 1
    ev = Evidence(n=n, unit="requests")
    if d == 1 and n >= 2:
        ev.bound, ev.test = unseen_share_bound(n), f"n alike answers bound another answer's share ({percent(CONFIDENCE)})"
    elif p.pattern == "cold-transient":
        ev.p, ev.test = p.cold_transient_p, "how often random order puts the odd answers on the first request"
    phrase = (f"undetermined: {n} of {needed} answered" if short else
              f"{d} distinct of {n}" + ("" if d == 1 or word == "undetermined" else f", {word}"))
    if p.errors:
        phrase += f" ({p.errors} failed)"
    if short:
        ev.bound, ev.test = None, None
        text = f"one answer in {n}, but {n} of the {needed} requests it needed answered: undetermined"
    elif d == 1 and n >= 2:
        bound = ev.bound
        text = (f"one answer in {n}" + (f": an answer more common than {bound:.0%} would likely have shown"
                                        if bound is not None else ": too few to bound another answer's share"))
    else:
        text = f"{d} distinct answers in {n} (lengths {p.lengths_text}; {_pattern_text(p) or word})"
    return Claim(stage=stage, kind="gate", arm=arm, prompt=p.prompt_id, configuration=configuration, verdict=word,
                 good=good, counts={"distinct": d, "answered": n, "requests": p.requests, "errors": p.errors,
                                    "truncated": p.truncated},
                 evidence=ev, caveats=caveat_cut(p.truncated, n) + caveat_failed(p.errors, p.requests),
                 phrase=phrase, text=text)


def claims(result: GateResult, summary: Any) -> list[Claim]:
    """Per gate prompt: distinct answers of those answered, the pattern, and its bound or test.

    "Cold-start transient" is one family over the prompts that varied: each prompt's test (how often
    random order puts its odd answers on its first request) must hold in the closed testing
    procedure over them (every subset containing it, by Fisher's combination, at 5 %): with three
    prompts varying in random order, naming a transient on some prompt by chance stays within 5 %.
    A lone first-request difference among varying prompts is "first request differs", not a transient."""
    arm, extra = getattr(summary, "arm", ""), run_caveats(summary, "gate")
    out = [prompt_claim(p, arm, needed=result.n_requests or None) for p in result.prompts]
    varied = [(c, p) for c, p in zip(out, result.prompts, strict=True) if p.distinct_answers > 1 and p.answered >= 2]
    if len(varied) > 1:
        ps = [p.cold_transient_p if p.pattern == "cold-transient" and p.cold_transient_p is not None else 1.0
              for _, p in varied]
        held = closed_fisher(ps, ALPHA)
        family = Family(name="varying prompts of the gate", size=len(varied), correction="closed testing (Fisher)")
        for (c, p), ok in zip(varied, held, strict=True):
            c.family = family
            if p.pattern == "cold-transient" and not ok:
                c.verdict = "first request differs"
                c.phrase = f"{p.distinct_answers} distinct of {p.answered}, first request differs"
                c.text = (f"{p.distinct_answers} distinct answers in {p.answered} (lengths {p.lengths_text}); "
                          f"only the first request differs, but over the {len(varied)} varying prompts too few to "
                          f"call it a cold-start transient (closed testing, Fisher's combination)")
                c.evidence.p = None  # the sentence gives no p: the family's test, not this prompt's, decided
                c.caveats.append(f"too few to call it a cold-start transient over the {len(varied)} varying prompts")
    for c in out:
        c.run_id, c.caveats = getattr(summary, "run_id", ""), c.caveats + extra
    return out


COLUMNS: dict[str, ColumnType] = {
    "prompt_id": "str", "requests": "int", "answered": "int", "errors": "int", "distinct_answers": "int",
    "modal_share": "float", "answer_lengths_tokens": "list[int]", "answer_length_counts": "list[int]", "compared_by": "str",
    "truncated": "int", "max_tokens": "int", "modal_tied": "bool", "cold_is_modal": "bool", "warm_distinct": "int",
    "warm_count": "int"}

"""The restarts stage's records and what is computed from them alone: each launch's outcome
(`LaunchOutcome`, with what it found in its compile caches), per gate prompt the within- and
across-launch figures (`RestartPromptResult`), the stage's result (`RestartsResult`), the two
verdicts (`within_verdict_of`, `across_verdict_of`, the launch test corrected over the prompts
tested together by `with_family`), `summarise` that makes them from the launches' answers (and
`recompute` again with today's statistics), the claims and the export's restarts table. Nothing
here starts a runtime; `suite.stages.restarts.run` fills these records."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

from suite.analysis.claims import Claim, Evidence, Family, caveat_cut, run_caveats
from suite.analysis.levels import CONFIDENCE
from suite.analysis.repro import ALPHA, AcrossWord, LaunchFigures, LaunchPair, Pattern, across_of, analyse_launches, joint_p, requests_for_transient
from suite.analysis.stats import holm
from suite.stages.base import ColumnType, FreshLaunch, length_lists
from suite.stages.gate.result import gate_from_prompt_lines, gate_of_lines
from suite.stages.gate_models import GateResult, samples_of


class LaunchOutcome(FreshLaunch):
    gate: GateResult | None = None
    cache_dir: str | None = None  # the compile/autotune cache root this launch was pointed at
    cache_files_before: int | None = None  # files already in it when the launch started (0: empty)
    cache_files: dict[str, int] = Field(default_factory=dict)  # per cache (triton, inductor, ...), before the start
    cache_settings: dict[str, str] = Field(default_factory=dict)  # e.g. TRITON_CACHE_AUTOTUNING=1
    # The runtime's own log line saying it found a cache and compiled again instead (the definition's
    # `not_loaded_patterns`); None: it said no such thing.
    cache_not_loaded: str | None = None


class RestartPromptResult(BaseModel):
    prompt_id: str
    compared_by: str
    within_distinct: list[int]  # per launch that answered
    across_distinct: int
    modal_per_launch_distinct: int
    agreement: float | None  # share of cross-launch answer pairs that are identical
    agreement_ci95: tuple[float, float] | None  # over launches; None with too few launches or all alike
    ci_note: str | None = None  # why there is no interval
    ci_method: str | None = None
    within_agreement: float | None = None  # share of identical answer pairs inside one launch
    # alike | alike up to the cap | differ | no detectable difference | too few | undetermined |
    # order inside launches (the launch test rejects, but answers persist inside launches)
    across: AcrossWord = "undetermined"
    across_text: str = ""
    alike_bound: float | None = None  # all launches alike: a launch differing more often would have shown
    permutation_p: float | None = None  # the launches' answers differ (small p), by launch labels
    # That p corrected for the prompts tested together (Holm over the prompts whose launches were
    # compared by the test; `family` of them): "differ" needs this at most ALPHA.
    permutation_p_adjusted: float | None = None
    family: int = 1
    order_p: float | None = None  # answers persist inside launches (small p): the launch test's assumption fails
    order_floor: float | None = None  # the order test's smallest attainable p (None: no launch varied inside)
    unseen_bound: float | None = None  # one answer per launch: an answer more common would have shown
    cold_transient_p: float | None = None  # chance that random order puts the odd answers first
    cold_switch_p: float | None = None  # chance that one switch placed at random in each launch does
    cold_series: int = 0  # launches whose answers varied only at the first request(s)
    lengths_text: str
    errors: int
    truncated: int = 0  # answers over all launches that stopped at max_tokens
    answered: int = 0  # answers over all launches (the denominator of `truncated`)
    # This prompt's first request in each launch was the first the runtime served after its start
    # (every cache empty); False: the runtime had answered other prompts before it.
    process_cold: bool = True
    # Every launch gave the same answer at the same request position (request i of one launch
    # equals request i of every other): a cold/warm split that repeats identically in each
    # launch lowers `agreement` but keeps this true.
    same_sequence: bool | None = None
    same_answers: bool | None = None  # every launch gave the same set of answers, the same modal one
    consistent_across: bool | None = None
    stable_within: bool | None = None
    within_patterns: list[Pattern] = Field(default_factory=list)
    per_launch: list[LaunchFigures] = Field(default_factory=list)
    pairs: list[LaunchPair] = Field(default_factory=list)
    across_logprob_diff: float | None = None  # nats, between launches' modal answers, shared tokens
    same_tokens_logprobs_apart: bool = False


class RestartsResult(BaseModel):
    launches: int  # K requested
    launched: int  # started and answered
    requests_per_launch: int
    prompts: list[RestartPromptResult]
    launch_outcomes: list[LaunchOutcome] = Field(default_factory=list)
    stable_within: bool | None  # every launch gave one answer per prompt
    consistent_across: bool | None  # the launches gave the same answers (sequence or set) per prompt
    within_verdict: str = ""
    across_verdict: str = ""
    verdict: str
    # "fresh": every launch started with empty compile/autotune caches (those the runtime's
    # definition declares, each pointed at a new folder); "kept": every launch after the first found
    # the first launch's caches. With both, the kept pass is nested here.
    cache_mode: Literal["fresh", "kept"] = "fresh"
    with_kept_caches: RestartsResult | None = None
    controls: list[str] = Field(default_factory=list)  # the controls every launch ran with
    # The run stopped in the stage: the launches it finished, rebuilt from their request lines
    # (`rebuild`), and what was cut; None where the stage finished.
    interrupted: str | None = None

    @property
    def caches_text(self) -> str:
        """What the launches found in their compile caches: counted, not assumed."""
        counts = [o.cache_files_before for o in self.launch_outcomes if o.cache_files_before is not None]
        if not counts:
            return "compile caches not recorded"
        if self.cache_mode == "fresh":
            found = [c for c in counts if c]
            return ("every launch started with empty compile caches" if not found else
                    f"every launch was to start with empty compile caches, but {len(found)} found files")
        later = counts[1:]
        if later and all(later):
            text = (f"launches after the first found the first's compile caches ({', '.join(map(str, later))} "
                     "files at their start)")
            refused = [o for o in self.launch_outcomes[1:] if o.cache_not_loaded]
            if refused:
                text += (f", but the runtime did not load them in {len(refused)} of {len(later)} and compiled "
                          f"again (its log: {refused[0].cache_not_loaded!r}): kept caches saved no compiling there")
            return text
        return (f"launches after the first were to reuse the first's compile caches but found "
                f"{', '.join(map(str, later)) or 'none'} files at their start: the runtime wrote no cache there, "
                "nothing was kept")


def transient_p(prompts: list[RestartPromptResult]) -> tuple[float | None, str]:
    """How often chance would put the odd answers of the launch-prompt series that changed only at
    their first request there, and which chance: random order, and where two or more series show
    that shape, also one switch placed at random in each (a little more often). None where no series
    has that shape. The within-launch verdict's test, and its claim's p."""
    shaped = [p for p in prompts if any(x == "cold-transient" for x in p.within_patterns)]
    joint = joint_p([p.cold_transient_p for p in shaped]) if shaped else None
    series = sum(1 for p in prompts for x in p.within_patterns if x not in ("stable", "undetermined"))
    if joint is not None and series >= 2:
        switch_joint = joint_p([p.cold_switch_p for p in shaped])
        return (max(joint, switch_joint) if switch_joint is not None else None,
                "random order, or one switch placed at random in each,")
    return joint, "random order"


def within_verdict_of(prompts: list[RestartPromptResult]) -> str:
    """Stability inside each launch, named by its pattern (a cold-start transient is one).

    "stable" carries what it bounds (an answer more common per request would likely have shown)
    and, where answers stopped at max_tokens, that it holds up to the cap; "cold-start transient"
    only where random order would put the odd answers on the first requests at most 5 % of the time,
    and, where two or more launch-prompt series show that shape, also one switch that stays placed
    at random in each of them: two launches of 5 requests that both change right after the first
    do that (1/4)^2 = 6 % of the time under switches (random order: (1/5)^2 = 4 %), so they are
    undetermined and the page says how many requests per launch would tell (6). One series alone is
    held to random order only, as in the gate: its 20 requests put a switch there 1/19 = 5.3 % of
    the time, and that series cannot tell a change that stays right after the first request from
    a cold-start effect anyway.
    """
    patterns = [(p.prompt_id, pat) for p in prompts for pat in p.within_patterns]
    unstable = [(pid, pat) for pid, pat in patterns if pat not in ("stable", "undetermined")]
    if not patterns:
        return "undetermined"
    n_launches = max((len(p.within_patterns) for p in prompts), default=0)
    cut = sum(p.truncated for p in prompts)
    answers = sum(sum(x.answered for x in p.per_launch) for p in prompts)
    cap = (f"; up to the cap: {cut} of {answers} answers cut at max_tokens, answers may differ past it"
           if cut else "")
    if not unstable:
        # per launch, not pooled: the launch with the fewest answers bounds what each could have missed
        bounds = [p.unseen_bound for p in prompts if p.unseen_bound is not None]
        fewest = min((x.answered for p in prompts for x in p.per_launch if x.answered), default=0)
        bound = (f"; inside a launch, an answer more common than {max(bounds):.1%} per request would likely have "
                 f"shown ({fewest} or more answers per launch)" if bounds and len(bounds) == len(prompts) else
                 f"; {fewest} answer{'s' if fewest != 1 else ''} per launch: too few to bound what a launch missed"
                 if fewest and fewest < 6 else "")
        return f"stable within every launch (one answer per prompt){bound}{cap}"
    if all(pat == "cold-transient" for _, pat in unstable):
        cold = {p.prompt_id: p.process_cold for p in prompts}
        where = ", ".join(sorted({pid for pid, _ in unstable}))
        whats = {("only the first request after the start differs" if cold.get(pid, True) else
                  "only the prompt's first request differs (the runtime had served other prompts before it)")
                 for pid, _ in unstable}
        series = len(unstable)
        joint, chance = transient_p(prompts)
        if joint is not None and joint <= ALPHA:
            return (f"cold-start transient within launches ({where}: in {len(unstable)} launch-prompt series of "
                    f"{len(patterns)}, {'; '.join(sorted(whats))}; the rest agree; {chance} "
                    f"would put the odd answers there with p = {joint:.2g}){cap}")
        per = max((len(x.within_patterns) and max(y.answered for y in x.per_launch)) for x in prompts)
        return (f"undetermined within launches ({where}: in {len(unstable)} launch-prompt series of "
                f"{len(patterns)} only the first request differs, but {chance} would put the odd answers "
                f"there with p = {joint if joint is not None else 1:.2g}: too few to call it a cold-start transient; "
                f"{requests_for_transient(series=series)} requests per launch would tell, {per} were sent){cap}")
    kinds = ", ".join(f"{pid}: {'/'.join(p.within_patterns)}" for p in prompts
                      for pid in [p.prompt_id] if any(x not in ("stable", "undetermined") for x in p.within_patterns))
    return f"NOT stable within launches ({kinds}; {n_launches} launches){cap}"


def _agreement_text(p: RestartPromptResult) -> str:
    within = f", within launches {p.within_agreement:.3f}" if p.within_agreement is not None else ""
    if p.agreement is None:
        return "agreement —"
    text = f"agreement across launches {p.agreement:.3f}"
    if p.agreement_ci95:
        return (text + f" [{p.agreement_ci95[0]:.3f}, {p.agreement_ci95[1]:.3f}] "
                f"({p.ci_method or 'over launches'}){within}")
    if p.across == "alike":
        return text + within
    per = ", ".join(f"{x.agreement:.2f}" for x in p.pairs if x.agreement is not None)
    return text + (f" (pairs of launches: {per}; {p.ci_note})" if per and p.ci_note else "") + within


def across_verdict_of(prompts: list[RestartPromptResult], enough: bool) -> tuple[bool | None, str]:
    """Consistency across launches: launches compared with each other, not answers pooled.

    True only where every prompt's launches gave the same answer sequence, enough of them to bound
    a differing launch; False where a prompt's launches differ by the permutation test; else None.
    """
    known = [p for p in prompts if p.across != "undetermined"]
    if not enough or not known:
        return None, "undetermined: fewer than two launches answered"
    if any(p.across == "differ" for p in known):
        consistent: bool | None = False
        head = "NOT consistent across launches"
    elif all(p.across == "alike" for p in known):
        consistent, head = True, "consistent across launches"
    elif any(p.across == "differ or persist" for p in known):
        consistent, head = None, "NOT the same answers across launches (launches that differ, or answers that persist inside them)"
    elif any(p.across == "order inside launches" for p in known):
        consistent, head = None, "undetermined across launches: answers persist inside launches"
    elif any(p.across == "no detectable difference" for p in known):
        consistent, head = None, "no detectable difference across launches"
    else:
        consistent, head = None, "inconclusive across launches"
    parts = []
    for p in prompts:
        lp = ""
        if p.same_tokens_logprobs_apart and p.across_logprob_diff is not None:
            lp = f"; same tokens but logprobs apart by {p.across_logprob_diff:.3g} nats"
        parts.append(f"{p.prompt_id}: {p.across_text}; {_agreement_text(p)}{lp}")
    return consistent, f"{head} ({'; '.join(parts)})"


def with_family(prompts: list[RestartPromptResult]) -> None:
    """Correct the launch test for the prompts tested together: Holm over the prompts whose launches
    the permutation test compared, each prompt's verdict and sentence made again from its adjusted p.
    With three varying prompts and no launch effect, "NOT consistent" at 5 % per prompt was printed
    in 9-14 % of runs; over the family it is at most 5 %."""
    adjusted = holm([p.permutation_p for p in prompts])
    family = sum(1 for p in prompts if p.permutation_p is not None)
    for p, adj in zip(prompts, adjusted, strict=True):
        p.permutation_p_adjusted, p.family = adj, max(1, family)
        if p.permutation_p is None:
            continue
        k = sum(1 for x in p.per_launch if x.answered)
        p.across, p.consistent_across, p.across_text = across_of(
            k, False, p.truncated, p.answered, p.permutation_p, adj, family, p.order_p,
            sum(1 for x in p.within_patterns if x == "switch"),
            min((x.answered for x in p.per_launch if x.answered), default=None), p.order_floor)


def summarise(outcomes: list[LaunchOutcome], prompt_ids: list[str], k: int, n: int) -> RestartsResult:
    answered = [o for o in outcomes if o.gate is not None]
    prompts: list[RestartPromptResult] = []
    for pid in prompt_ids:
        launches = [samples_of(o.gate, pid) for o in answered if o.gate is not None]
        launches = [launch for launch in launches if launch]
        if not launches:
            continue
        cold_flags = [p.cold_warm.process_cold for o in answered if o.gate is not None
                      for p in o.gate.prompts if p.prompt_id == pid and p.cold_warm is not None]
        a = analyse_launches(launches)
        prompts.append(RestartPromptResult(
            prompt_id=pid, compared_by=a.compared_by, within_distinct=a.within_distinct,
            across_distinct=a.across_distinct, modal_per_launch_distinct=a.modal_per_launch_distinct,
            agreement=a.agreement, agreement_ci95=a.agreement_ci95, ci_note=a.ci_note, ci_method=a.ci_method,
            within_agreement=a.within_agreement, across=a.across, across_text=a.across_text,
            alike_bound=a.alike_bound, permutation_p=a.permutation_p, unseen_bound=a.unseen_bound,
            cold_transient_p=a.cold_transient_p, cold_switch_p=a.cold_switch_p, cold_series=a.cold_series,
            lengths_text=a.lengths_text, errors=a.errors,
            truncated=sum(1 for launch in launches for s in launch if s.ok and s.truncated),
            answered=sum(1 for launch in launches for s in launch if s.ok),
            process_cold=any(cold_flags) if cold_flags else pid == prompt_ids[0],
            same_sequence=a.same_sequence, same_answers=a.same_answers, consistent_across=a.consistent_across,
            stable_within=a.stable_within, within_patterns=a.within_patterns, per_launch=a.per_launch,
            pairs=a.pairs, across_logprob_diff=a.across_logprob_diff,
            same_tokens_logprobs_apart=a.same_tokens_logprobs_apart, order_p=a.order_p,
            order_floor=a.order_floor))
    with_family(prompts)
    answering = [o for o in answered if o.gate is not None and any(p.answered for p in o.gate.prompts)]
    enough = len(answering) >= 2 and bool(prompts)
    known = [p.stable_within for p in prompts if p.stable_within is not None]
    stable = all(known) if known else None
    consistent, across = across_verdict_of(prompts, enough)
    within = within_verdict_of(prompts)
    if not enough:
        verdict = f"undetermined: {len(answering)} of {k} launches answered"
    else:
        verdict = f"within: {within}; across: {across}"
    return RestartsResult(launches=k, launched=len(answering), requests_per_launch=n, prompts=prompts,
                          launch_outcomes=outcomes, stable_within=stable, consistent_across=consistent,
                          within_verdict=within, across_verdict=across, verdict=verdict)


def export_rows(result: RestartsResult) -> list[dict[str, Any]]:
    """`suite export`'s restarts table: one row per gate prompt: within/across-launch figures, agreement interval."""
    rows = []
    for p in result.prompts:
        low, high = p.agreement_ci95 or (None, None)
        rows.append({
            "launches": result.launches, "launched": result.launched, "prompt_id": p.prompt_id,
            "within_distinct": list(p.within_distinct), "across_distinct": p.across_distinct,
            "agreement": p.agreement, "agreement_ci95_low": low, "agreement_ci95_high": high,
            **dict(zip(("answer_lengths_tokens", "answer_length_counts"), length_lists(p.lengths_text), strict=True)),
            "answered": p.answered or sum(x.answered for x in p.per_launch),
            "truncated": p.truncated, "cache_mode": result.cache_mode, "controls": list(result.controls),
            "cache_files_before": [o.cache_files_before for o in result.launch_outcomes],
        })
    return rows


def recompute(result: RestartsResult, summary: Any = None) -> RestartsResult:
    """The within- and across-launch verdicts made again from the launches' answers (each launch's
    gate keeps them), with today's statistics; the kept-caches pass too."""
    ids = list(dict.fromkeys(p.prompt_id for o in result.launch_outcomes if o.gate is not None for p in o.gate.prompts))
    again = summarise(result.launch_outcomes, ids, result.launches, result.requests_per_launch)
    again.cache_mode, again.controls, again.interrupted = result.cache_mode, list(result.controls), result.interrupted
    if result.with_kept_caches is not None:
        again.with_kept_caches = recompute(result.with_kept_caches, summary)
    return again


def from_lines(result: RestartsResult, lines: list[Any]) -> tuple[RestartsResult, list[str]]:
    """Each launch's short gate made from its request lines (the line's label names the launch and
    its cache pass, `launch-<i>-<fresh|kept>`) and checked against the answers the summary kept: a
    launch whose lines group otherwise is rebuilt from them, and the within- and across-launch
    verdicts are made again from every launch (`summarise`). A launch with no line keeps its stored
    answers."""
    by_label: dict[str, dict[str, list[Any]]] = {}
    for q in lines:
        if getattr(q, "kind", None) == "restarts" and getattr(q, "label", None):
            by_label.setdefault(q.label, {}).setdefault(q.prompt_id, []).append(q)
    if not by_label:
        return result, []
    said: list[str] = []

    def one(r: RestartsResult) -> RestartsResult:
        outcomes: list[LaunchOutcome] = []
        changed = False
        for o in r.launch_outcomes:
            own = by_label.get(f"launch-{o.index}-{r.cache_mode}")
            if o.gate is None or not own:
                outcomes.append(o)
                continue
            gate, notes = gate_from_prompt_lines(o.gate, own)
            if notes:
                changed = True
                said.extend(f"{r.cache_mode} caches, launch {o.index}: {n}" for n in notes)
                o = o.model_copy(update={"gate": gate})
            outcomes.append(o)
        kept = one(r.with_kept_caches) if r.with_kept_caches is not None else None
        if not changed:
            return r if kept is r.with_kept_caches else r.model_copy(update={"with_kept_caches": kept})
        ids = list(dict.fromkeys(p.prompt_id for o in outcomes if o.gate is not None for p in o.gate.prompts))
        again = summarise(outcomes, ids, r.launches, r.requests_per_launch)
        again.cache_mode, again.controls, again.with_kept_caches = r.cache_mode, list(r.controls), kept
        again.interrupted = r.interrupted
        return again

    again = one(result)
    return (again, said) if said else (result, [])


_LAUNCH_LABEL = re.compile(r"launch-(\d+)-(fresh|kept)$")


def rebuild(lines: list[Any], before: Any = None, logs: Path | None = None) -> RestartsResult | None:
    """The launches a restarts stage finished before its run stopped (a time limit, a kill), rebuilt
    from their request lines (labelled `launch-<i>-<fresh|kept>`), each cache pass with the
    launches it finished: a launch is kept where every prompt has its full short gate (as many
    requests as the longest launch's); the one cut mid-way is named and left out. Start-up times
    and the compile-cache files each launch found are not in request lines: absent, not guessed
    (so "kept" is not shown as a count). None where no launch finished. `before` and `logs` are the
    hook's (`Stage.rebuild`); the launches' gates need neither."""
    by: dict[tuple[str, int], list[Any]] = {}
    for q in lines:
        m = _LAUNCH_LABEL.match(getattr(q, "label", "") or "") if getattr(q, "kind", None) == "restarts" else None
        if m is not None:
            by.setdefault((m.group(2), int(m.group(1))), []).append(q)
    if not by:
        return None
    gate = getattr(before, "gate", None)
    order = [p.prompt_id for p in gate.prompts] if gate is not None else []
    prompts = sorted({q.prompt_id for qs in by.values() for q in qs},
                     key=lambda pid: (order.index(pid) if pid in order else len(order), pid))
    n = max(sum(1 for q in qs if q.prompt_id == pid) for qs in by.values() for pid in prompts)
    passes: list[RestartsResult] = []
    cut: list[str] = []
    modes: tuple[Literal["fresh", "kept"], ...] = ("fresh", "kept")
    for mode in modes:
        outcomes: list[LaunchOutcome] = []
        for (pass_of, i), qs in sorted(by.items()):
            if pass_of != mode:
                continue
            if any(sum(1 for q in qs if q.prompt_id == pid) < n for pid in prompts):
                cut.append(f"{mode} caches launch {i} ({len(qs)} of {n * len(prompts)} requests)")
                continue
            outcomes.append(LaunchOutcome(index=i, status="ok", cache_dir=f"{mode}/launch-{i}",
                                          gate=gate_of_lines(f"launch-{i}-{mode}", qs, prompts, n)))
        if outcomes:
            r = summarise(outcomes, prompts, len(outcomes), n)
            r.cache_mode = mode
            r.controls = list(outcomes[0].gate.controls if outcomes[0].gate is not None else [])
            passes.append(r)
    if not passes:
        return None
    result = passes[0]
    if len(passes) > 1:
        result.with_kept_caches = passes[1]
    done = "; ".join(f"{r.cache_mode} caches: {r.launched} launch{'es' if r.launched != 1 else ''}" for r in passes)
    result.interrupted = (f"the run stopped in the restarts: the launches it finished rebuilt from their request lines "
                          f"({done})" + (f"; cut mid-way and left out: {', '.join(cut)}" if cut else "")
                          + "; a launch that had not answered yet left no line; start-up times and the compile-cache "
                            "files each launch found are not kept in request lines")
    return result


ACROSS_GOOD: dict[AcrossWord, bool] = {"alike": True, "differ": False, "differ or persist": False}

# The within-launch claim's closed vocabulary: its word, and the verdict it prints.
WithinWord = Literal["stable", "cold-start transient", "varies", "undetermined"]
WithinVerdict = Literal["stable within launches", "cold-start transient within launches", "varies within launches",
                        "undetermined within launches"]
WITHIN_VERDICTS: dict[WithinWord, WithinVerdict] = {
    "stable": "stable within launches", "cold-start transient": "cold-start transient within launches",
    "varies": "varies within launches", "undetermined": "undetermined within launches"}
# Per claim kind, the verdicts it may print (`Stage.verdicts`): the across-launch claim's are the
# analysis's words (`AcrossWord`).
VERDICTS: dict[str, tuple[str, ...]] = {"within-launches": get_args(WithinVerdict), "across-launches": get_args(AcrossWord)}


def claims(result: RestartsResult, summary: Any) -> list[Claim]:
    """Within launches (one claim over the prompts) and across launches (one per prompt, corrected
    over the prompts tested together), for each cache mode that ran."""
    arm, run_id, extra = getattr(summary, "arm", ""), getattr(summary, "run_id", ""), run_caveats(summary, "restarts")
    out: list[Claim] = []
    passes = [result] + ([result.with_kept_caches] if result.with_kept_caches is not None else [])
    for r in passes:
        conf = f"{r.cache_mode} caches"
        few = [] if r.launched >= 6 else [f"{r.launched} launches: too few for an interval over launches"]
        cut = sum(p.truncated for p in r.prompts)
        answered = sum(p.answered for p in r.prompts)
        head = r.within_verdict.split(" (")[0].split(";")[0]
        word: WithinWord = ("stable" if r.stable_within else "cold-start transient" if head.startswith("cold-start") else
                            "undetermined" if head.startswith("undetermined") or r.stable_within is None else "varies")
        # the transient's test, where the verdict rests on it (named, or undetermined by it)
        chance_p = transient_p(r.prompts)[0] if word in ("cold-start transient", "undetermined") else None
        out.append(Claim(stage="restarts", kind="within-launches", arm=arm, run_id=run_id, configuration=conf,
                         verdict=WITHIN_VERDICTS[word], good=word == "stable" if word != "undetermined" else None,
                         counts={"launches": r.launched, "requests_per_launch": r.requests_per_launch,
                                 "answered": answered, "truncated": cut},
                         evidence=Evidence(n=r.launched, unit="launches",
                                           test="how often chance puts the odd answers on the first requests"
                                           if chance_p is not None else None, p=chance_p,
                                           bound=max((p.unseen_bound for p in r.prompts if p.unseen_bound is not None),
                                                     default=None)),
                         caveats=caveat_cut(cut, answered) + ([r.interrupted] if r.interrupted else []) + extra,
                         phrase=f"{word} within {r.launched} launches",
                         text=r.within_verdict))
        for p in r.prompts:
            family = (Family(name="prompts of the across-launch verdict", size=p.family, correction="Holm")
                      if p.family > 1 else None)
            fewest = min((x.answered for x in p.per_launch if x.answered), default=0)
            order = ([f"{fewest} answers a launch cannot tell launches that differ from answers that persist inside them"]
                     if p.across == "differ or persist" else [])
            out.append(Claim(stage="restarts", kind="across-launches", arm=arm, run_id=run_id, prompt=p.prompt_id,
                             configuration=conf, verdict=p.across, good=ACROSS_GOOD.get(p.across),
                             counts={"launches": len([x for x in p.per_launch if x.answered]),
                                     "distinct": p.across_distinct, "answered": p.answered, "truncated": p.truncated},
                             evidence=Evidence(test="permutation test over launch labels" if p.permutation_p is not None
                                               else None, n=len(p.per_launch), unit="launches", p=p.permutation_p,
                                               p_adjusted=p.permutation_p_adjusted, interval=p.agreement_ci95,
                                               level=CONFIDENCE if p.agreement_ci95 else None, bound=p.alike_bound),
                             family=family, caveats=caveat_cut(p.truncated, p.answered) + few + order + extra,
                             phrase=f"{p.across} across {len(p.per_launch)} launches", text=p.across_text))
    return out


COLUMNS: dict[str, ColumnType] = {
    "launches": "int", "launched": "int", "prompt_id": "str", "within_distinct": "list[int]", "across_distinct": "int",
    "agreement": "float", "agreement_ci95_low": "float", "agreement_ci95_high": "float",
    "answer_lengths_tokens": "list[int]", "answer_length_counts": "list[int]", "answered": "int", "truncated": "int", "cache_mode": "str",
    "controls": "list[str]", "cache_files_before": "list[int]"}

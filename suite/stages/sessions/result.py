"""The sessions stage's records and what is computed from them alone: per prompt and per
configuration (base, adapter) the agreements between runs within and across sessions with their
intervals over sessions (`SessionsPromptResult`, `SessionsConfiguration`), each session's outcome,
the stage's result (`SessionsResult`), the summaries that make them from the runs' answers
(`summarise_prompt`, `summarise_configuration`), the study's table lines, the claims and the
export's sessions table. Nothing here starts a runtime; `suite.stages.sessions.run` fills these
records."""

from __future__ import annotations

import re
from itertools import combinations
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

from suite.analysis.claims import Claim, Evidence, caveat_cut, run_caveats
from suite.analysis.levels import CONFIDENCE, percent
from suite.analysis.repro import RunsAnalysis, Sample, alike_bound, alike_launches_text, analyse_launches, analyse_runs, answer_key
from suite.stages.base import ColumnType, FreshLaunch


class SessionsPromptResult(BaseModel):
    prompt_id: str
    compared_by: str
    runs: int  # answered runs over all sessions (K*R when none failed)
    failed: int
    distinct: int  # distinct answers over all runs
    within_agreement: float | None  # share of pairs of runs inside one session that are identical
    across_agreement: float | None  # share of pairs of runs from two different sessions that are identical
    across_ci95: tuple[float, float] | None  # 95% interval over sessions
    ci_note: str | None = None
    distinct_after_first: int | None  # distinct answers once each session's first run is left out
    first_run_differs: int  # sessions whose first run differs from that session's later runs
    sessions_with_answers: int
    truncated: int = 0  # answers that stopped at max_tokens (they may differ past the cap)
    # The first run of a session is the only difference: leaving each session's first run out
    # leaves one answer. Only then is the transient named.
    transient_only: bool = False

    @property
    def line(self) -> str:
        ci = ""
        if self.across_ci95 and self.across_ci95[0] < self.across_ci95[1]:
            ci = f" [{self.across_ci95[0]:.3f}, {self.across_ci95[1]:.3f}]"
        elif self.across_ci95 or self.ci_note:  # every pair alike (or apart): an interval would say nothing
            ci = (" (no interval: every pair alike)" if self.across_agreement == 1.0 else
                  " (no interval: every pair differs)" if self.across_agreement == 0.0 else " (no interval)")
        across = "—" if self.across_agreement is None else f"{self.across_agreement:.3f}{ci}"
        within = "—" if self.within_agreement is None else f"{self.within_agreement:.3f}"
        cut = f"; {self.truncated} of {self.runs} cut at max_tokens" if self.truncated else ""
        failed = f" ({self.failed} failed)" if self.failed else ""
        return (f"{self.distinct} distinct in {self.runs} runs{failed}; identical answer pairs across sessions "
                f"{across}, within sessions {within}{cut}")


class SessionsConfiguration(BaseModel):
    label: Literal["base", "adapter"]
    status: Literal["ok", "skipped"] = "ok"
    reason: str | None = None
    prompts: list[SessionsPromptResult] = Field(default_factory=list)
    runs: RunsAnalysis | None = None  # the study's unit: one run = one pass over the prompt set

    @property
    def alike(self) -> str | None:
        """Every session gave the same output hash: what that many sessions could have missed (a
        session is a fresh process, so the sentence is the restarts stage's for its launches)."""
        r = self.runs
        if self.status != "ok" or r is None or r.distinct_runs != 1 or r.incomplete_runs or r.sessions < 2:
            return None
        text, _ = alike_launches_text(r.sessions, r.truncated, r.runs * r.items, unit="session", units="sessions",
                                      alike_what=f"one output hash in {r.runs} runs")
        return text

    @property
    def line(self) -> str:
        """`adapter: 24 distinct output hashes in 24 runs; across sessions ...; within sessions ...`."""
        if self.status != "ok":
            return f"{self.label}: skipped ({self.reason})"
        r = self.runs
        if r is None or not r.agreements:
            return f"{self.label}: no run answered"
        head = f"{self.label}: {r.distinct_runs} distinct output hash{'es' if r.distinct_runs != 1 else ''} in {r.runs} runs"
        head += f" ({r.items} prompt{'s' if r.items != 1 else ''} each, {r.sessions} sessions)"
        if r.incomplete_runs:
            head += f", {r.incomplete_runs} run(s) with a failed prompt left out of the hashes"
        across = []
        for a in r.agreements:
            if a.across is None:
                across.append(f"{a.measure} —")
                continue
            ci = (f" [{a.across_ci95[0]:.3f}, {a.across_ci95[1]:.3f}]" if a.across_ci95
                  else " (no interval)" if a.ci_note else "")
            across.append(f"{a.measure} {a.across:.3f}{ci}")
        within = [f"{a.measure} {a.within:.3f}" for a in r.agreements if a.within is not None]
        line = f"{head}; across sessions (95% interval over sessions): {', '.join(across)}"
        if within:
            line += f"; within sessions: {', '.join(within)}"
        if r.truncated:
            line += f"; {r.truncated} answers cut at max_tokens (they may differ past the cap)"
        if r.transient_only and r.distinct_after_first is not None:
            line += (f"; the first run differs in {r.first_run_differs} of {r.sessions} sessions and is the only "
                     "difference: 1 output hash without it")
        alike = self.alike
        if alike:
            line += f"; {alike}"
        return line


class SessionOutcome(FreshLaunch):
    """One session: a fresh process of the arm's configuration."""


class SessionsResult(BaseModel):
    sessions: int  # K requested
    replicates: int  # R
    launched: int
    lora: bool
    lora_select: str | None = None
    configurations: list[SessionsConfiguration]
    outcomes: list[SessionOutcome] = Field(default_factory=list)
    table: list[str] = Field(default_factory=list)  # one line per configuration, then per configuration and prompt
    verdict: str
    controls: list[str] = Field(default_factory=list)  # the controls every session ran with


def _within_agreement(sessions: list[list[Sample]], by: str) -> float | None:
    agree = total = 0
    for runs in sessions:
        keys = [answer_key(s, by) for s in runs if s.ok]
        for a, b in combinations(keys, 2):
            total += 1
            agree += a == b
    return agree / total if total else None


def summarise_prompt(prompt_id: str, sessions: list[list[Sample]]) -> SessionsPromptResult:
    """One prompt's runs, grouped by session (each session's runs in replicate order)."""
    a = analyse_launches(sessions)
    by = a.compared_by
    later = [[s for s in runs if s.index > 0] for runs in sessions]
    keys_later = {answer_key(s, by) for runs in later for s in runs if s.ok}
    first_differs = 0
    for runs in sessions:
        ok = sorted((s for s in runs if s.ok), key=lambda s: s.index)
        if len(ok) >= 2 and ok[0].index == 0:
            rest = {answer_key(s, by) for s in ok[1:]}
            first_differs += answer_key(ok[0], by) not in rest
    answered = [s for runs in sessions for s in runs if s.ok]
    all_keys = {answer_key(s, by) for s in answered}
    return SessionsPromptResult(
        prompt_id=prompt_id, compared_by=by, runs=len(answered),
        failed=sum(1 for runs in sessions for s in runs if not s.ok), distinct=a.across_distinct,
        within_agreement=_within_agreement(sessions, by), across_agreement=a.agreement,
        across_ci95=a.agreement_ci95, ci_note=a.ci_note,
        distinct_after_first=len(keys_later) if keys_later else None, first_run_differs=first_differs,
        sessions_with_answers=sum(1 for runs in sessions if any(s.ok for s in runs)),
        truncated=sum(1 for s in answered if s.truncated),
        transient_only=first_differs > 0 and len(keys_later) == 1 and len(all_keys) > 1)


def summarise_configuration(label: Literal["base", "adapter"], prompt_ids: list[str],
                            sessions: list[dict[str, list[Sample]]]) -> SessionsConfiguration:
    """One configuration's sessions (each: prompt id -> that session's samples in replicate order):
    the run-level figures over the prompt set, then each prompt's own."""
    config = SessionsConfiguration(label=label)
    per_prompt = {pid: [s[pid] for s in sessions if s.get(pid)] for pid in prompt_ids}
    config.prompts = [summarise_prompt(pid, ss) for pid, ss in per_prompt.items() if ss]
    runs = [[{pid: s[pid][r] for pid in prompt_ids if r < len(s.get(pid, []))}
             for r in range(max((len(v) for v in s.values()), default=0))] for s in sessions]
    runs = [rs for rs in runs if rs]
    if runs:
        config.runs = analyse_runs(runs, prompt_ids)
    return config


def table_lines(result: SessionsResult) -> list[str]:
    """The study's table: one line per configuration over the prompt set (runs), then one per
    configuration and prompt."""
    lines = [c.line for c in result.configurations]
    for c in result.configurations:
        if c.status != "ok":
            continue
        for p in c.prompts:
            transient = ""
            if p.transient_only and p.distinct_after_first is not None:
                transient = (f"; the first run differs in {p.first_run_differs} of {p.sessions_with_answers} "
                             f"sessions and is the only difference: {p.distinct_after_first} distinct without it")
            lines.append(f"{c.label} {p.prompt_id}: {p.line}{transient}")
    return lines


_SESSION_LABEL = re.compile(r"session-(\d+)-run-(\d+)-(base|adapter)$")


def _counts(c: SessionsConfiguration) -> tuple[Any, ...]:
    """What the lines decide of a configuration: per prompt its answered, failed and distinct runs,
    and the distinct output hashes over the runs."""
    return (tuple((p.prompt_id, p.runs, p.failed, p.distinct) for p in c.prompts),
            (c.runs.runs, c.runs.distinct_runs) if c.runs is not None else None)


def _counts_text(c: SessionsConfiguration) -> str:
    r = c.runs
    hashes = f"{r.distinct_runs} distinct output hash{'es' if r.distinct_runs != 1 else ''} in {r.runs} runs" \
        if r is not None else "no run"
    return hashes + " (" + ", ".join(
        f"{p.prompt_id} {p.distinct} distinct of {p.runs}" for p in c.prompts) + ")"


def from_lines(result: SessionsResult, lines: list[Any]) -> tuple[SessionsResult, list[str]]:
    """Every configuration's figures made from the request lines (the line's label names its session,
    run and configuration: `session-<i>-run-<r>-<base|adapter>`) with today's statistics, so the
    table and the claims never rest on what the run computed when it ended; where the lines count
    otherwise than the summary kept (an answer edited, a request added or dropped), the
    disagreement is named. A configuration with no line keeps what the summary kept."""
    per: dict[str, dict[int, dict[int, dict[str, Sample]]]] = {}
    for q in lines:
        m = _SESSION_LABEL.match(getattr(q, "label", "") or "") if getattr(q, "kind", None) == "sessions" else None
        if m is None:
            continue
        session, run, label = int(m.group(1)), int(m.group(2)), m.group(3)
        per.setdefault(label, {}).setdefault(session, {}).setdefault(run, {})[q.prompt_id] = \
            q.sample().model_copy(update={"index": run})
    if not per:
        return result, []
    said: list[str] = []
    configs: list[SessionsConfiguration] = []
    for c in result.configurations:
        own = per.get(c.label)
        if c.status != "ok" or not own:
            configs.append(c)
            continue
        ids = [p.prompt_id for p in c.prompts] or sorted({pid for s in own.values() for r in s.values() for pid in r})
        # a run that sent its prompts answers each of them: one with no line did not answer (the
        # session's process died during that run), as the run itself counted it
        sessions = [{pid: [runs[r].get(pid) or Sample(index=r, error="no answer") for r in sorted(runs)] for pid in ids}
                    for _, runs in sorted(own.items())]
        again = summarise_configuration(c.label, ids, sessions)
        if _counts(again) != _counts(c):
            said.append(f"{c.label}: the summary kept {_counts_text(c)}, its request lines say {_counts_text(again)}; "
                        "the lines are used")
        configs.append(again)
    again_result = result.model_copy(update={"configurations": configs})
    again_result.table = table_lines(again_result)
    again_result.verdict = "; ".join(again_result.table) or "no session answered"
    return again_result, said


def export_rows(result: SessionsResult) -> list[dict[str, Any]]:
    """`suite export`'s sessions table (study 2's): per configuration, each agreement measure between
    runs (one pass over the prompt set) across sessions with its interval, and within sessions."""
    rows: list[dict[str, Any]] = []
    for c in result.configurations:
        base: dict[str, Any] = {"sessions": result.sessions, "replicates": result.replicates, "configuration": c.label,
                "status": c.status, "reason": c.reason, "controls": list(result.controls)}
        runs_ = c.runs
        if runs_ is None:
            rows.append(base)
            continue
        for a in runs_.agreements:
            low, high = a.across_ci95 or (None, None)
            rows.append(base | {
                "runs": runs_.runs, "distinct_runs": runs_.distinct_runs, "prompts": runs_.items,
                "incomplete_runs": runs_.incomplete_runs, "truncated": runs_.truncated,
                "measure": a.measure, "across": a.across, "across_ci95_low": low, "across_ci95_high": high,
                "across_pairs": a.across_pairs, "ci_note": a.ci_note, "within": a.within,
                "within_pairs": a.within_pairs, "first_run_only_difference": runs_.transient_only,
            })
    return rows


def unseen_sessions_caveat(sessions: int) -> list[str]:
    """What an interval over `sessions` sessions cannot allow for: a difference that only some
    sessions take (a kernel chosen at start-up) is, below a share, in none of them with a chance of
    5 % or more, and leaving sessions out cannot vary what none showed (benchmarks/bench_calibration.py,
    family runs: where a session took it, the item and token intervals covered 0.95-1.00; where
    none did, 0.00-0.72)."""
    if sessions < 2:
        return []
    share = 1.0 - (1.0 - CONFIDENCE) ** (1.0 / sessions)
    return [f"a difference that fewer than {share:.0%} of sessions take may be in none of these {sessions} "
            f"(a chance of {percent(1.0 - CONFIDENCE, space=True)} or more): the intervals over sessions do not allow for it"]


# The sessions claim's closed vocabulary (`Stage.verdicts`): the number of output hashes is in the
# claim's counts and phrase, never in its verdict.
SessionsVerdict = Literal["one output hash", "output hashes differ", "undetermined"]
VERDICTS: dict[str, tuple[str, ...]] = {"sessions": get_args(SessionsVerdict)}


def _sessions_verdict(r: RunsAnalysis) -> SessionsVerdict:
    """One output hash over every run, several, or none to tell (no run answered whole)."""
    return "undetermined" if not r.runs else "one output hash" if r.distinct_runs == 1 else "output hashes differ"


def claims(result: SessionsResult, summary: Any) -> list[Claim]:
    """Per configuration (base, adapter): distinct output hashes over the runs, resampled over sessions
    (the study's unit): the identical-runs agreement across sessions with its interval, or what alike
    sessions bound."""
    arm, run_id, extra = getattr(summary, "arm", ""), getattr(summary, "run_id", ""), run_caveats(summary, "sessions")
    out: list[Claim] = []
    for c in result.configurations:
        r = c.runs
        if c.status != "ok" or r is None:
            continue
        same = r.agreement("identical runs")
        alike = r.distinct_runs == 1 and r.runs > 0
        out.append(Claim(stage="sessions", kind="sessions", arm=arm, run_id=run_id, configuration=c.label,
                         verdict=_sessions_verdict(r),
                         good=alike if r.runs else None,
                         counts={"sessions": r.sessions, "runs": r.runs, "distinct_runs": r.distinct_runs,
                                 "truncated": r.truncated, "incomplete_runs": r.incomplete_runs},
                         evidence=Evidence(test="agreement of runs across sessions (jackknife over sessions)",
                                           n=r.sessions, unit="sessions",
                                           interval=same.across_ci95 if same else None,
                                           level=CONFIDENCE if same and same.across_ci95 else None,
                                           bound=alike_bound(r.sessions) if alike else None),
                         caveats=caveat_cut(r.truncated, r.runs * r.items) + unseen_sessions_caveat(r.sessions)
                         + extra,
                         phrase=f"{c.label}: {r.distinct_runs} distinct output hash{'es' if r.distinct_runs != 1 else ''} "
                                f"in {r.runs} runs of {r.sessions} sessions",
                         text=c.line))
    return out


COLUMNS: dict[str, ColumnType] = {
    "sessions": "int", "replicates": "int", "configuration": "str", "status": "str", "reason": "str",
    "controls": "list[str]", "runs": "int", "distinct_runs": "int", "prompts": "int", "incomplete_runs": "int",
    "truncated": "int", "measure": "str", "across": "float", "across_ci95_low": "float", "across_ci95_high": "float",
    "across_pairs": "int", "ci_note": "str", "within": "float", "within_pairs": "int",
    "first_run_only_difference": "bool"}

"""Figures: what the pages and the exported tables show, read from the typed run records.

`summary.json` holds one typed result per stage (`Summary.gate` is a GateResult, ...; see
suite.records). The readers here turn them into the figures a person compares: per gate prompt
the distinct answers, their lengths with counts and where each departs from the modal one; the
headline of a run (distinct answers of N, median TTFT, output tokens/s, extraction clean share);
latency percentiles with units; the extraction grid; the control matrix; restarts with their
agreement interval; the batch-composition modes; the watchdog's peaks and trip; the configuration signatures side by side.
A stage that did not run is None and shows "not run" or "—". Runs are grouped by model and arm.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from memwatch.report import WatchdogReport
from suite.analysis.repro import PromptAnalysis, analyse, first_diff
from suite.analysis.stats import mean_se_of
from suite.errors import SuiteError
from suite.records import Summary, load_all
from suite.signature import flatten_signature
from suite.stages import EXTRACTION_STAGE, LATENCY_STAGE, ORDER, VERDICT_STAGE
from suite.stages.controls import ControlMatrixResult
from suite.stages.gate.view import gate_settings_text  # noqa: F401 - the index page's gate line, and tests
from suite.stages.gate_models import GateResult
from suite.stages.latency import LatencyLine
from suite.stages.latency.view import latency_level
from suite.stages.lines import AnswerLine

log = logging.getLogger(__name__)


def slug(text: str) -> str:
    """A file-name-safe form of a model, arm, prompt or run name, one per name: a name that is
    already safe is kept as it is; any other gets a short hash of the whole name after its safe
    form, so `a/b` and `a-b` (or two long names alike in their first 120 characters) never share
    a page."""
    text = str(text)
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")
    if s == text and len(s) <= 120:
        return s
    return f"{s[:120] or 'x'}-{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"


def with_thousands(text: str | None) -> str:
    """Numbers of four digits or more in `text` with thousands separators (`1021 ×5` -> `1,021 ×5`)."""
    return re.sub(r"(?<![\d.,])\d{4,}(?![\d.])", lambda m: f"{int(m.group()):,}", text or "")


def lengths_text(pairs: list[tuple[int | None, int]]) -> str:
    """`1,021 ×5, 1,024 ×1`: each length in tokens with how many answers had it."""
    return ", ".join(f"{'?' if length is None else format(length, ',')} ×{count}" for length, count in pairs)


@dataclass
class AnswerView:
    """One distinct answer to a gate prompt as a page shows it, split where it departs from the modal one."""

    rank: int  # 0 = modal
    text: str
    count: int
    requests: list[int]  # 1-based request numbers that gave it (1 = the cold request)
    n_tokens: int | None
    common: str = ""  # the prefix shared with the modal answer
    rest: str = ""  # from the first differing character on
    depart_char: int | None = None
    depart_token: int | None = None
    margin: float | None = None  # the modal answer's top-1 minus top-2 logprob where this one departs
    depart_chars: str | None = None  # the two characters where the texts part, named (whitespace too)

    @property
    def modal(self) -> bool:
        return self.rank == 0


@dataclass
class PromptView:
    """One gate prompt of one run as the pages show it."""

    prompt_id: str
    n: int
    answered: int
    errors: int
    distinct: int
    lengths: list[tuple[int | None, int]]
    lengths_label: str
    cold_differs: bool | None
    cold_vs_warm: str
    first_divergence: str | None
    modal_share: float | None
    compared_by: str
    answers: list[AnswerView]
    stopped_reason: str | None
    page: str | None = None  # the answer page, relative to the site root
    truncated: int = 0  # answers that stopped at max_tokens
    max_tokens: int | None = None
    pattern_text: str = ""  # stable, a cold-start transient, random order, ...
    counts_note: str | None = None  # the count by text beside the count by token ids, where they differ
    unseen_bound: float | None = None  # one answer in n: an answer this common would have been seen (95%)
    max_logprob_diff: float | None = None
    modal_tied: bool = False  # the most common answers are tied: none of them is "modal"
    process_cold: bool = True  # request 1 was the first the runtime served after its start

    @property
    def of_text(self) -> str:
        """`20`, or `5 answered of 20` when requests failed."""
        return str(self.answered) if self.answered == self.n else f"{self.answered} answered of {self.n}"

    @property
    def truncation_text(self) -> str | None:
        if not self.truncated:
            return None
        return (f"{self.truncated} of {self.answered} cut at {self.max_tokens} tokens: "
                "answers may differ past the cap")

    @property
    def lengths_text(self) -> str:
        return lengths_text(self.lengths) if self.lengths else with_thousands(self.lengths_label)


def _answers_of(p: PromptAnalysis) -> list[AnswerView]:
    """The distinct answers of a gate prompt, with their departure points from the modal one."""
    divs = {d.rank: d for d in p.divergences}
    out: list[AnswerView] = []
    modal_text = ""
    for a in p.answers:
        ans = AnswerView(rank=a.rank, text=a.text, count=a.count, requests=[k + 1 for k in a.indices],
                         n_tokens=a.n_tokens)
        if a.rank == 0:
            modal_text = ans.common = a.text
        else:
            d = divs.get(a.rank)
            cut = d.char_index if d is not None else first_diff(modal_text, a.text)
            ans.common, ans.rest, ans.depart_char = a.text[:cut], a.text[cut:], cut
            ans.depart_chars = f"modal {char_name(modal_text, cut)}, this {char_name(a.text, cut)}"
            if d is not None:
                ans.depart_token, ans.margin = d.token_index, d.modal_margin
        out.append(ans)
    return out


def char_name(text: str, i: int) -> str:
    """The character at `i` as a reader can see it: `'a' U+0061`, `end of answer` past the end."""
    if i >= len(text):
        return "end of answer"
    c = text[i]
    shown = {"\n": "\\n", "\t": "\\t", "\r": "\\r", " ": "space"}.get(c, c)
    return f"{shown!r} U+{ord(c):04X}" if shown == c else f"{shown} U+{ord(c):04X}"


def _cold_vs_warm(p: PromptAnalysis) -> tuple[bool | None, str]:
    cw = p.cold_warm
    if cw is None:
        return None, "—"
    # Only the first prompt's first request follows the start; later prompts' first requests
    # meet a runtime that has served others.
    first = "first request after start" if cw.process_cold else "first request of this prompt (runtime already warm)"
    if cw.modal_tied:
        text = f"{first}: modal answer tied, no cold-vs-modal comparison"
    elif cw.cold_is_modal is None:
        text = f"{first} failed"
    elif cw.cold_is_modal:
        text = f"{first} = modal answer"
    else:
        text = f"{first} differs from modal" + ("" if cw.cold_in_warm is None else
                                                (", seen later too" if cw.cold_in_warm else ", never seen later"))
    text += f"; later: {cw.warm_distinct} distinct in {cw.warm_count}"
    return (None if cw.cold_is_modal is None else not cw.cold_is_modal), text


def prompt_view(p: PromptAnalysis, prompt_id: str, max_tokens: int | None = None,
                stopped_reason: str | None = None) -> PromptView:
    """Per gate prompt: distinct answers of N, lengths with counts, cold vs warm, divergence."""
    answers = _answers_of(p)
    lengths = [(lc.tokens, lc.count) for lc in p.lengths] or [(a.n_tokens, a.count) for a in answers]
    cold_differs, cold_txt = _cold_vs_warm(p)
    fd_txt = None
    if p.divergences:
        d = p.divergences[0]
        fd_txt = f"token {d.token_index}" if d.token_index is not None else f"character {d.char_index}"
        if d.modal_margin is not None:
            fd_txt += f" (top-1/top-2 margin there {d.modal_margin:.3g} nats)"
    by_text, by_ids = p.distinct_by_text, p.distinct_by_ids
    counts_note = None
    if by_ids is not None and by_ids != by_text:
        counts_note = (f"by token ids {by_ids}, by text {by_text}: "
                       + ("the same text came as different token ids" if by_ids > by_text
                          else "different ids decoded to the same text counted apart"))
    return PromptView(
        prompt_id=prompt_id, n=p.requests, answered=p.answered, errors=p.errors, distinct=p.distinct_answers,
        lengths=lengths, lengths_label=p.lengths_text, cold_differs=cold_differs, cold_vs_warm=cold_txt,
        first_divergence=fd_txt, modal_share=p.modal_share, compared_by=p.compared_by, answers=answers,
        stopped_reason=stopped_reason, truncated=p.truncated, max_tokens=max_tokens,
        pattern_text=p.pattern_text, counts_note=counts_note, unseen_bound=p.unseen_share_bound,
        max_logprob_diff=p.max_logprob_diff, modal_tied=p.modal_tied,
        process_cold=p.cold_warm.process_cold if p.cold_warm is not None else False,
    )


def gate_prompts(gate: GateResult | None) -> list[PromptView]:
    """Every gate prompt of a run's gate, as the pages show it."""
    if gate is None:
        return []
    return [prompt_view(p, p.prompt_id, p.max_tokens, p.stopped_reason) for p in gate.prompts]


@dataclass
class Headline:
    """The figures the index and `suite results` show for one run."""

    distinct: int | None = None  # the most distinct answers of any gate prompt ...
    answered: int | None = None  # ... among how many answers of that prompt (the denominator)
    n: int | None = None  # ... and how many requests it sent
    ttft_p50_ms: float | None = None
    tokens_per_s: float | None = None
    clean_share: float | None = None
    clean_share_se: float | None = None
    complete_share: float | None = None  # clean and complete (no wrong, no missing fact): the honest headline
    complete_share_se: float | None = None
    complete_n: int | None = None
    clean_n: int | None = None

    @property
    def distinct_text(self) -> str:
        """`1 of 20`; `1 of 5 answered (20 requests)` where requests failed: distinct of answered."""
        if self.distinct is None:
            return "not run"
        if self.answered is None or not self.n:
            return str(self.distinct)
        if self.answered == self.n:
            return f"{self.distinct} of {self.n}"
        return f"{self.distinct} of {self.answered} answered ({self.n} requests)"


def headline(s: Summary) -> Headline:
    h = Headline()
    prompts = gate_prompts(s.gate)
    if prompts:
        # The prompt with the most distinct answers (of those, the fewest answered): its count
        # and its own denominator, never another prompt's request count.
        worst = max(prompts, key=lambda p: (p.distinct, -p.answered))
        h.distinct, h.answered, h.n = worst.distinct, worst.answered, worst.n or None
    level = latency_level(s.latency)
    if level is not None:
        h.ttft_p50_ms = None if level.ttft_s.p50 is None else level.ttft_s.p50 * 1000.0
        h.tokens_per_s = level.output_tokens_per_s.p50
    if s.extraction is not None:
        h.clean_share, h.clean_share_se, h.clean_n = mean_se_of(s.extraction.clean_share)
        h.complete_share, h.complete_share_se, h.complete_n = mean_se_of(s.extraction.complete_share)
    return h


# --------------------------------------------------------------------------------------------
# The site model: runs grouped by model and arm.
# --------------------------------------------------------------------------------------------

@dataclass
class Run:
    summary: Summary
    run_dir: Path
    headline: Headline
    page: str = ""
    log_page: str = ""  # the site's copy of a failed runtime's log (secrets scrubbed); "" when none

    @property
    def failure(self) -> dict[str, Any] | None:
        """What a failed arm's page shows first: how the runtime failed, its error line, its log's
        last lines and the link to the log; and the stages that did not run after it."""
        s = self.summary
        if s.status != "failed":
            return None
        f = getattr(s, "failure", None)
        invocation = getattr(s, "invocation", None)
        asked = list(invocation.stages) if invocation and invocation.stages else list(ORDER)  # a bench's own
        not_run = [name for name in asked if getattr(s, name, None) is None]
        if f is None:  # a record from before failures were typed: its reason says what failed
            return {"what": s.reason or "failed", "error_line": None, "tail": [], "log": self.log_page,
                    "not_run": not_run}
        return {"what": f.what, "error_line": f.error_line, "tail": list(f.log_tail), "log": self.log_page,
                "not_run": not_run}

    @property
    def verdict(self) -> str:
        """The arm in one line, the first thing its card says: how it failed, or whether it gave the
        same answer twice (each prompt that varied with its count and pattern), and what the
        process of elimination found."""
        s = self.summary
        if s.status == "failed":
            f = getattr(s, "failure", None)
            return f.what if f is not None else (s.reason or "failed")
        if s.status == "skipped":
            return f"not run: {s.reason}" if s.reason else "not run"
        prompts = s.gate.prompts if s.gate else []
        if not prompts:
            return "gate not run"
        varied = [p for p in prompts if p.distinct_answers > 1]
        if not varied and s.gate is not None and s.gate.reproducible is None:
            return s.gate.verdict or "undetermined"  # "undetermined: k of n answered": never "the same answer"
        if not varied:
            answered = sorted({p.answered for p in prompts})
            each = f"{answered[0]} of {answered[0]}" if len(answered) == 1 else "every request answered"
            return (f"the same answer every time: 1 answer per prompt ({each} on each of {len(prompts)} "
                    f"prompt{'s' if len(prompts) != 1 else ''})")
        parts = [f"{p.prompt_id}: {p.distinct_answers} answers of {p.answered}"
                 + (f", {p.pattern_text}" if p.pattern_text else "") for p in varied]
        line = "varies: " + "; ".join(parts)
        found = controls_finding(s.controls)
        return f"{line}; {found}" if found else line

    @property
    def bars(self) -> list[dict[str, Any]]:
        """Per gate prompt, its distinct answers as shares of the answered requests (the most
        common first): what the index draws as one bar per prompt."""
        out = []
        for p in (self.summary.gate.prompts if self.summary.gate else []):
            if not p.answered:
                continue
            segments = [{"share": a.count / p.answered, "count": a.count, "rank": a.rank}
                        for a in sorted(p.answers, key=lambda a: a.rank)]
            out.append({"prompt_id": p.prompt_id, "answered": p.answered, "requests": p.requests,
                        "distinct": p.distinct_answers, "segments": segments})
        return out

    @property
    def busy(self) -> str:
        """Where other processes took a share of the CPUs while this run's stages ran (suite.contention),
        one line naming those stages and the largest share; "" when none."""
        busy = {name: c for name, c in self.summary.contention.items() if c.busy}
        if not busy:
            return ""
        worst = max(c.others_share for c in busy.values())
        return (f"busy machine during {', '.join(busy)}: other processes used up to {worst:.0%} of the CPUs' time; "
                "these timings are not the runtime's alone")

    @property
    def overrides(self) -> str:
        """What this run was asked beyond its profile: the settings it changed (`restarts 6 ·
        reloads 1`), the stages when not a bench's own, the control sets asked for; or ""."""
        from suite.stages import ORDER

        invocation = getattr(self.summary, "invocation", None)
        if invocation is None:
            return ""
        parts = [invocation.overrides_text()]
        if invocation.stages and invocation.stages != list(ORDER):
            parts.append("stages " + ",".join(invocation.stages))
        if invocation.controls:
            parts.append("controls " + ",".join(invocation.controls))
        return " · ".join(p for p in parts if p)

    @property
    def command(self) -> str | None:
        invocation = getattr(self.summary, "invocation", None)
        return invocation.command_text() if invocation else None

    @property
    def s(self) -> Summary:
        return self.summary

    @property
    def date(self) -> str:
        return self.summary.started_at.replace("T", " ").replace("Z", " UTC")

    @property
    def digest(self) -> str:
        sig = self.summary.signature
        return sig.digest[:12] if sig and sig.digest else "—"


@dataclass
class ArmRuns:
    name: str
    runs: list[Run] = field(default_factory=list)  # oldest first

    @property
    def current(self) -> Run:
        """The newest complete run, else the newest run."""
        complete = [r for r in self.runs if r.s.status == "complete"]
        return (complete or self.runs)[-1]

    def for_stage(self, stage: str) -> Run:
        """The run whose `stage` result the model page shows: the newest complete run that holds
        one, else the newest run that holds one (an interrupted run keeps what it measured), else
        `current`. A study run after a bench (`suite study sessions`) does not hide the bench's gate."""
        holding = [r for r in self.runs if getattr(r.s, stage, None) is not None]
        complete = [r for r in holding if r.s.status == "complete"]
        return (complete or holding or [self.current])[-1]

    @property
    def gate_run(self) -> Run:
        """The run whose gate (the stage that gives the verdict) the pages show for this arm."""
        return self.for_stage(VERDICT_STAGE)

    @property
    def headline(self) -> Headline:
        """The arm's first-screen figures, each from the run the model page shows its stage from:
        a study run after a bench (sessions, restarts alone) hides none of the bench's figures."""
        h = headline(self.gate_run.s)
        timing = headline(self.for_stage(LATENCY_STAGE).s)
        scores = headline(self.for_stage(EXTRACTION_STAGE).s)
        h.ttft_p50_ms, h.tokens_per_s = timing.ttft_p50_ms, timing.tokens_per_s
        h.clean_share, h.clean_share_se, h.clean_n = scores.clean_share, scores.clean_share_se, scores.clean_n
        h.complete_share, h.complete_share_se, h.complete_n = (scores.complete_share, scores.complete_share_se,
                                                               scores.complete_n)
        return h


@dataclass
class ModelRuns:
    name: str
    arms: dict[str, ArmRuns] = field(default_factory=dict)
    page: str = ""

    @property
    def current(self) -> list[Run]:
        return [a.current for a in self.arms.values()]

    def current_for(self, stage: str) -> list[Run]:
        """Per arm, the run the page shows `stage` from (`ArmRuns.for_stage`)."""
        return [a.for_stage(stage) for a in self.arms.values()]

    def borrowed(self, stages: dict[str, str]) -> dict[str, list[str]]:
        """Per stage (keys of `stages`: record field -> its name on the page), one line per arm whose
        `stage` comes from another run than the arm's current one: which run, and its status."""
        out: dict[str, list[str]] = {}
        for arm in self.arms.values():
            cur = arm.current
            for stage in stages:
                r = arm.for_stage(stage)
                if r is not cur:
                    status = r.s.status + (f": {r.s.reason}" if r.s.reason and r.s.status != "complete" else "")
                    out.setdefault(stage, []).append(f"{arm.name}: {stages[stage]} from run {r.s.run_id} "
                                                     f"({status}), the newest of this arm that ran it")
        return out

    @property
    def gate_figures(self) -> dict[str, dict[str, float | None]]:
        """Per arm, the gate's own figures (every arm runs it, one request at a time, the same
        requests): its generated tokens per second of HTTP time and its J/token. The one source of
        the first screen's cost ratios and of the cost chart."""
        out: dict[str, dict[str, float | None]] = {}
        for name, arm in self.arms.items():
            s = arm.gate_run.s
            tokens = sum((a.n_tokens or 0) * a.count for p in (s.gate.prompts if s.gate else []) for a in p.answers)
            e = s.energy.get(VERDICT_STAGE)
            out[name] = {"tokens_per_s": tokens / s.gate.http_s if s.gate and s.gate.http_s and tokens else None,
                         "j_per_token": e.j_per_token if e else None,
                         "one_answer": s.gate.reproducible if s.gate is not None else None}
        return out

    @property
    def first_screen(self) -> dict[str, Any]:
        """Per arm, its three answers (suite.site.first_screen): same answer twice, what changes it,
        what the fix costs; each stage's part from the run the page shows that stage from."""
        from suite.site.first_screen import model_answers

        # the model's determinism mode, where an arm's start refused it: the engine's own line
        refused = next(((r.s.determinism.control or "determinism mode", r.s.determinism.error_line or "refused")
                        for a in self.arms.values() for r in a.runs
                        if r.s.determinism.outcome == "refused"), None)
        return dict(model_answers(self.arms, self.gate_figures, refused))

    @property
    def random_weights(self) -> bool:
        """Any run of this model served random weights (its signature says so): every page marks it."""
        return any(r.s.signature is not None and r.s.signature.model_random_weights
                   for a in self.arms.values() for r in a.runs)

    @property
    def all_runs(self) -> list[Run]:
        return sorted((r for a in self.arms.values() for r in a.runs),
                      key=lambda r: (r.s.started_at, r.s.run_id), reverse=True)


def group_runs(results: Path, summaries: list[Summary]) -> dict[str, ModelRuns]:
    models: dict[str, ModelRuns] = {}
    for s in summaries:
        m = models.setdefault(s.model, ModelRuns(name=s.model, page=f"models/{slug(s.model)}.html"))
        arm = m.arms.setdefault(s.arm, ArmRuns(name=s.arm))
        arm.runs.append(Run(summary=s, run_dir=results / s.model / s.arm / s.run_id,
                            headline=headline(s), page=f"runs/{slug(s.run_id)}-{slug(s.arm)}.html"))
    return dict(sorted(models.items()))


def load_runs(results: Path, problems: list[str] | None = None,
              skipped: list[str] | None = None) -> dict[str, ModelRuns]:
    """Every run under `results`, grouped by model and arm. With `problems`, a stage result that
    does not match this suite's models is left out of its run and described there (file, key,
    why) instead of stopping the load; a record that cannot be read is named and left out
    (`skipped`: see `load_all`)."""
    if not results.is_dir():
        raise SuiteError(f"{results}: no such results folder; run `suite bench` first")
    return group_runs(results, load_all(results, problems, skipped))


# --------------------------------------------------------------------------------------------
# Per-request lines (requests.jsonl, read by suite.records.read_requests): the gate's answers, latency timings.
# --------------------------------------------------------------------------------------------

def analyse_requests(requests: list[AnswerLine]) -> PromptAnalysis:
    """A gate prompt's analysis rebuilt from its request lines (for a run whose gate never finished)."""
    return analyse([q.sample() for q in requests])


def itl_gaps(q: LatencyLine) -> list[float]:
    """The gaps between a streamed request's chunks, seconds."""
    times = q.chunk_times_s
    return [b - a for a, b in pairwise(times)]


# --------------------------------------------------------------------------------------------
# Views of the model page.
# --------------------------------------------------------------------------------------------

@dataclass
class SignatureRow:
    key: str
    values: list[str]

    @property
    def differs(self) -> bool:
        return len(set(self.values)) > 1


def signature_rows(runs: list[Run]) -> list[SignatureRow]:
    flats = [flatten_signature(r.s.signature) for r in runs]
    keys: list[str] = []
    for f in flats:
        for k in f:
            if k not in keys:
                keys.append(k)
    return [SignatureRow(key=k, values=[f.get(k, "—") for f in flats]) for k in keys]


def controls_finding(controls: ControlMatrixResult | None) -> str:
    """What the process of elimination found, for an arm's one-line verdict: the head of its own
    sentence, with the evidence of the first control it credited and its n ("prefix-caching-off
    bring(s) document-4k back to one answer: the first answer alone differed in 0 of 3 launches
    against 3 of 3 at default, p = 0.05"); "" when it did not run."""
    if controls is None or not controls.elimination:
        return ""
    head = controls.elimination.strip().split(" (", 1)[0].rstrip(".")
    credited = [t for r in controls.rows if r.configuration in controls.restoring for t in r.tests if t.credited]
    if not credited:
        tests = [t for r in controls.rows for t in r.tests]
        needed = [t for t in tests if t.needed]
        if needed:
            t = max(needed, key=lambda t: t.needed or 0)
            return f"{head}: too few to tell (about {t.needed} {t.unit}s per row would)"
        return head
    t = credited[0]
    if t.unit == "launch":
        evidence = (f"the first answer alone differed in {t.others} of {t.n} launches against {t.default_others} "
                    f"of {t.default_n} at default")
    else:
        evidence = (f"{t.others} other answer(s) in {t.n} against {t.default_others} in {t.default_n} at default")
    p = f", p = {t.p_value:.2g}" if t.p_value is not None else ""
    more = f" (and {len(credited) - 1} more prompt(s) alike)" if len(credited) > 1 else ""
    return f"{head}: {evidence} on {t.prompt_id}{p}{more}"


@dataclass
class MemoryLine:
    """An arm's memory over its whole run: the main launch and every fresh launch after it (restarts,
    sessions, control rows, reloads) on one time axis from the main launch's start."""

    t_s: list[float]
    metrics: dict[str, list[float | None]]
    trip_t_s: float | None
    threshold_bytes: float | None
    launches: int  # how many launches the line covers
    # per sample, which launch it belongs to (0 = the first to start): the chart draws each launch's
    # line apart, never joined across launches (two launches that overlap stay two lines)
    launch: list[int] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)  # per launch, in the order they started


def memory_line(s: Any) -> MemoryLine:
    """The memory samples of every launch of one run (`Summary`), each shifted by when it started."""
    wd = s.watchdog
    reports = ([("main", wd)] if wd else []) + [(lw.label, lw.report) for lw in s.launch_watchdogs]
    if not reports:
        return MemoryLine([], {}, None, None, 0)
    t0 = reports[0][1].started_unix
    keys = sorted({k for _, r in reports for k in r.timeline.metrics if k.endswith("_bytes")})
    t_s: list[float] = []
    metrics: dict[str, list[float | None]] = {k: [] for k in keys}
    trip_t = threshold = None
    launch: list[int] = []
    labels: list[str] = []
    for i, (label, r) in enumerate(sorted(reports, key=lambda x: x[1].started_unix)):
        offset = r.started_unix - t0
        t_s.extend(offset + t for t in r.timeline.t_s)
        launch.extend([i] * len(r.timeline.t_s))
        labels.append(label)
        for k in keys:
            values = r.timeline.metrics.get(k)
            metrics[k].extend(values if values is not None else [None] * len(r.timeline.t_s))
        if r.trip is not None and trip_t is None:
            trip_t, threshold = offset + r.trip.t_s, r.trip.threshold_bytes
    return MemoryLine(t_s, metrics, trip_t, threshold, len(reports), launch, labels)


def watchdog_view(wd: WatchdogReport | None) -> dict[str, Any] | None:
    if wd is None:
        return None
    return {
        "tripped": wd.tripped,
        "trip": wd.trip,
        "samples": wd.sample_count,
        "duration_s": wd.duration_s,
        "interval_s": wd.mean_interval_s if wd.mean_interval_s is not None else wd.policy.interval_s,
        "cpu_pct": wd.cpu_pct_of_core,
        "policy": wd.policy,
        "probes": wd.probes,
        "peaks_gib": {k: v / 2**30 for k, v in wd.peaks.items() if k.endswith("_bytes")},
        "baselines_gib": {k: v / 2**30 for k, v in wd.baselines.items() if k.endswith("_bytes")},
    }


def arm_comparisons(runs: list[Run], arms: list[str]) -> list[dict[str, Any]]:
    """Each arm's modal answers against the first arm's, per gate prompt (the same weights in
    two formats or on two runtimes answering alike or not, and where they part)."""
    from suite.compare import compare_gates

    if len(runs) < 2:
        return []
    def degree(run: Run) -> tuple[int, int]:
        sig = run.s.signature
        return (sig.tensor_parallel or 1, sig.pipeline_parallel or 1) if sig is not None else (1, 1)

    def label(d: tuple[int, int]) -> str:
        return f"TP {d[0]}" + (f" x PP {d[1]}" if d[1] > 1 else "")

    base = runs[0]
    out = []
    for arm, run in zip(arms[1:], runs[1:], strict=True):
        prompts = compare_gates(base.s.gate, run.s.gate)
        if prompts:
            # the same model split over another number of GPUs: the comparison the page names as such
            degrees = (f"answers across tensor-parallel degrees: {label(degree(run))} vs {label(degree(base))}"
                       if degree(run) != degree(base) else None)
            out.append({"base": arms[0], "arm": arm, "prompts": prompts,
                        "agree": sum(1 for p in prompts if p.modal_agree and p.caveat is None), "n": len(prompts),
                        "caveats": sum(1 for p in prompts if p.caveat is not None), "degrees": degrees})
    return out


def machine_rows(model: ModelRuns) -> list[dict[str, Any]]:
    """Machines as a dimension of a model page: per arm, each machine that ran it (host, GPU model
    and UUID, driver: beside the signature, not in its digest) with its runs; where one arm ran on
    two machines or more, the newest run of each against the first machine's newest (`suite
    compare`: the gate, else the matrix's default row), with the machine note saying whether the
    configuration was one and whether the answers part. Records older than the machine field are
    counted as "not recorded"."""
    from suite.compare import compare_summaries

    out: list[dict[str, Any]] = []
    for arm, a in model.arms.items():
        groups: dict[str, list[Run]] = {}
        words: dict[str, str] = {}
        for r in a.runs:
            m = r.s.signature.machine if r.s.signature is not None else None
            hardware = r.s.signature.hardware if r.s.signature is not None else None
            gpu = getattr(hardware, "gpu", None) or ""
            # an older record names its GPU model only: one group per model, its UUID unknown
            key = (f"{m.host}|{','.join(m.gpu_uuids)}|{m.gpu_driver}" if m is not None else f"older|{gpu}")
            groups.setdefault(key, []).append(r)
            gpus = ", ".join(f"{n} ({u[:12]}…)" for n, u in zip(m.gpu_names, m.gpu_uuids, strict=False)) \
                if m is not None else ""
            words[key] = (f"{m.host}: {gpus or 'no NVIDIA GPU'}{f', driver {m.gpu_driver}' if m.gpu_driver else ''}"
                          if m is not None else
                          f"{gpu or 'no GPU named'} (which card not recorded: a record older than the machine field)")
        known = [k for k in groups if not k.startswith("older|")]
        if not known:
            continue
        first = groups[known[0]][-1]
        for key, runs in groups.items():
            row: dict[str, Any] = {"arm": arm, "machine": words[key], "runs": len(runs),
                                   "run_ids": [r.s.run_id for r in runs], "compared": None}
            if key != known[0]:
                c = compare_summaries(first.s, runs[-1].s)
                row["compared"] = {"against": first.s.run_id, "verdict": c.verdict, "machines": c.machines or ""}
            out.append(row)
    return out

"""Figures: what the pages and the exported tables show, read from the run records.

The stage results reach `summary.json` as dicts (one key per stage). The readers here turn them
into the figures a person compares: per gate prompt the distinct answers, their lengths with
counts and where each departs from the modal one; the headline of a run (distinct answers of N,
median TTFT, output tokens/s, extraction clean share); latency percentiles with units; the
extraction grid; the control matrix; restarts with their agreement interval; the watchdog's
peaks and trip; the configuration signatures side by side. They accept the stage models' field
names and tolerate missing ones, so a stage that did not run (or an older, sparser record) shows
"not run" or "—" instead of breaking the site. Runs are grouped by model and arm here too.
"""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable


from suite.errors import SuiteError
from suite.signature import flatten_signature
from suite.records import Summary, load_all
from suite.analysis.stats import PairedDifference, paired_difference

log = logging.getLogger(__name__)



def pick(d: Any, *keys: str, default: Any = None) -> Any:
    """The value of the first of `keys` present (and not None) in dict `d`; dotted keys descend."""
    if not isinstance(d, dict):
        return default
    for key in keys:
        cur: Any = d
        for part in key.split("."):
            if isinstance(cur, dict) and part in cur:
                cur = cur[part]
            else:
                cur = None
                break
        if cur is not None:
            return cur
    return default


def slug(text: str) -> str:
    """A file-name-safe form of a model, arm, prompt or run name."""
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", str(text)).strip("-.")
    return s[:120] or "x"


def as_float(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return None if isinstance(v, float) and math.isnan(v) else float(v)
    if isinstance(v, dict):  # a Distribution or MeanSE
        return as_float(pick(v, "p50", "mean", "value"))
    return None


def mean_se(v: Any) -> tuple[float | None, float | None, int | None]:
    """(mean, standard error, n) from a MeanSE dict or a bare number."""
    if isinstance(v, dict):
        return as_float(v.get("mean")), as_float(v.get("se")), v.get("n")
    return as_float(v), None, None


def lengths_counts(raw: Any) -> list[tuple[int | None, int]]:
    """Answer lengths (tokens; None: unknown) with their counts, from a dict, pairs or dicts."""
    pairs: list[tuple[int | None, int]] = []

    def as_len(v: Any) -> int | None:
        return None if v is None else int(v)

    if isinstance(raw, dict):
        pairs = [(as_len(k), int(v)) for k, v in raw.items()]
    elif isinstance(raw, list):
        for item in raw:
            if isinstance(item, dict):
                count = pick(item, "count", "n", default=1)
                pairs.append((as_len(pick(item, "tokens", "length", "n_tokens")), int(count)))
            elif isinstance(item, (list, tuple)) and len(item) == 2:
                pairs.append((as_len(item[0]), int(item[1])))
    return pairs


def with_thousands(text: str | None) -> str:
    """Numbers of four digits or more in `text` with thousands separators (`1021 ×5` -> `1,021 ×5`)."""
    return re.sub(r"(?<![\d.,])\d{4,}(?![\d.])", lambda m: f"{int(m.group()):,}", text or "")


def lengths_text(pairs: list[tuple[int | None, int]]) -> str:
    """`1,021 ×5, 1,024 ×1`: each length in tokens with how many answers had it."""
    return ", ".join(f"{'?' if length is None else format(length, ',')} ×{count}" for length, count in pairs)


@dataclass
class DistinctAnswer:
    """One distinct answer to a gate prompt, split where it departs from the modal answer."""

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
class GatePrompt:
    prompt_id: str
    n: int | None  # requests sent
    answered: int | None
    errors: int
    distinct: int | None
    lengths: list[tuple[int | None, int]]
    lengths_label: str
    cold_differs: bool | None
    cold_vs_warm: str
    first_divergence: str | None
    modal_share: float | None
    compared_by: str | None
    answers: list[DistinctAnswer]
    stopped_reason: str | None
    page: str | None = None  # the answer page, relative to the site root
    truncated: int = 0  # answers that stopped at max_tokens
    max_tokens: int | None = None
    pattern_text: str = ""  # stable, a cold-start transient, random order, ...
    counts_note: str | None = None  # the count by text beside the count by token ids, where they differ
    unseen_bound: float | None = None  # one answer in n: an answer this common would have been seen (95%)
    max_logprob_diff: float | None = None

    @property
    def of_text(self) -> str:
        """`20`, or `5 answered of 20` when requests failed."""
        if self.answered is None or self.n is None or self.answered == self.n:
            return str(self.answered if self.answered is not None else self.n)
        return f"{self.answered} answered of {self.n}"

    @property
    def truncation_text(self) -> str | None:
        if not self.truncated:
            return None
        return (f"{self.truncated} of {self.answered} cut at {self.max_tokens} tokens: "
                "answers may differ past the cap")

    @property
    def lengths_text(self) -> str:
        return lengths_text(self.lengths) if self.lengths else with_thousands(self.lengths_label)


def _answers_of(p: dict[str, Any]) -> list[DistinctAnswer]:
    """The distinct answers recorded in a gate prompt result, with their departure points."""
    raw = pick(p, "answers", default=[])
    if not isinstance(raw, list):
        return []
    divs = {pick(d, "rank"): d for d in pick(p, "divergences", default=[]) if isinstance(d, dict)}
    out: list[DistinctAnswer] = []
    modal_text = ""
    for i, a in enumerate(x for x in raw if isinstance(x, dict)):
        rank = int(pick(a, "rank", default=i))
        text = pick(a, "text", "text_preview", default="")
        text = text if isinstance(text, str) else json.dumps(text)
        indices = pick(a, "indices", default=[])
        ans = DistinctAnswer(rank=rank, text=text, count=int(pick(a, "count", default=len(indices) or 1)),
                             requests=[int(k) + 1 for k in indices], n_tokens=pick(a, "n_tokens"))
        if rank == 0:
            modal_text = text
            ans.common = text
        else:
            d = divs.get(rank, {})
            cut = pick(d, "char_index")
            if cut is None:
                cut = common_prefix(modal_text, text)
            ans.common, ans.rest, ans.depart_char = text[:cut], text[cut:], cut
            ans.depart_chars = f"modal {char_name(modal_text, cut)}, this {char_name(text, cut)}"
            ans.depart_token = pick(d, "token_index")
            ans.margin = pick(d, "modal_margin")
        out.append(ans)
    return out


def char_name(text: str, i: int) -> str:
    """The character at `i` as a reader can see it: `'a' U+0061`, `end of answer` past the end."""
    if i >= len(text):
        return "end of answer"
    c = text[i]
    shown = {"\n": "\\n", "\t": "\\t", "\r": "\\r", " ": "space"}.get(c, c)
    return f"{shown!r} U+{ord(c):04X}" if shown == c else f"{shown} U+{ord(c):04X}"


def gate_prompts(gate: dict[str, Any] | None) -> list[GatePrompt]:
    """Per gate prompt: distinct answers of N, lengths with counts, cold vs warm, divergence."""
    if not gate:
        return []
    raw = pick(gate, "prompts", default=[])
    items: list[tuple[str, dict[str, Any]]] = []
    if isinstance(raw, dict):
        items = [(str(k), v) for k, v in raw.items() if isinstance(v, dict)]
    elif isinstance(raw, list):
        items = [(str(pick(v, "prompt_id", "id", default=f"prompt-{i + 1}")), v)
                 for i, v in enumerate(raw) if isinstance(v, dict)]
    out = []
    for pid, p in items:
        answers = _answers_of(p)
        distinct = pick(p, "distinct_answers", "distinct")
        if distinct is None and answers:
            distinct = len(answers)
        lengths = lengths_counts(pick(p, "lengths"))
        if not lengths and answers:
            lengths = [(a.n_tokens, a.count) for a in answers]
        cw = pick(p, "cold_warm")
        cold_differs: bool | None = None
        if isinstance(cw, dict):
            is_modal = pick(cw, "cold_is_modal")
            # Only the first prompt's first request follows the start; later prompts' first
            # requests meet a runtime that has served others (records from before say nothing).
            first = ("first request after start" if pick(cw, "process_cold", default=True)
                     else "first request of this prompt (runtime already warm)")
            cold_differs = None if is_modal is None else not is_modal
            if pick(cw, "modal_tied", default=False):
                cold_txt = f"{first}: modal answer tied, no cold-vs-modal comparison"
            elif is_modal is None:
                cold_txt = f"{first} failed"
            elif is_modal:
                cold_txt = f"{first} = modal answer"
            else:
                in_warm = pick(cw, "cold_in_warm")
                cold_txt = f"{first} differs from modal" + ("" if in_warm is None else
                                                             (", seen later too" if in_warm else ", never seen later"))
            cold_txt += f"; later: {pick(cw, 'warm_distinct', default='?')} distinct in {pick(cw, 'warm_count', default='?')}"
        else:
            cold_txt = "—"
        fd_txt = None
        divs = pick(p, "divergences", default=[])
        if isinstance(divs, list) and divs and isinstance(divs[0], dict):
            d = divs[0]
            idx, margin = pick(d, "token_index"), pick(d, "modal_margin")
            fd_txt = f"token {idx}" if idx is not None else f"character {pick(d, 'char_index', default='?')}"
            if margin is not None:
                fd_txt += f" (top-1/top-2 margin there {float(margin):.3g} nats)"
        by_text, by_ids = pick(p, "distinct_by_text"), pick(p, "distinct_by_ids")
        counts_note = None
        if by_ids is not None and by_text is not None and by_ids != by_text:
            counts_note = (f"by token ids {by_ids}, by text {by_text}: "
                           + ("the same text came as different token ids" if by_ids > by_text
                              else "different ids decoded to the same text counted apart"))
        out.append(GatePrompt(
            prompt_id=pid, n=pick(p, "requests", "n"), answered=pick(p, "answered"),
            errors=int(pick(p, "errors", default=0)), distinct=distinct, lengths=lengths,
            lengths_label=str(pick(p, "lengths_text", default="")), cold_differs=cold_differs,
            cold_vs_warm=cold_txt, first_divergence=fd_txt, modal_share=pick(p, "modal_share"),
            compared_by=pick(p, "compared_by"), answers=answers, stopped_reason=pick(p, "stopped_reason"),
            truncated=int(pick(p, "truncated", default=0) or 0), max_tokens=pick(p, "max_tokens"),
            pattern_text=str(pick(p, "pattern_text", default="") or ""), counts_note=counts_note,
            unseen_bound=pick(p, "unseen_share_bound"), max_logprob_diff=pick(p, "max_logprob_diff"),
        ))
    return out


@dataclass
class Headline:
    """The figures the index and `suite results` show for one run."""

    distinct: int | None = None
    n: int | None = None
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
        if self.distinct is None:
            return "not run"
        return f"{self.distinct} of {self.n}" if self.n else str(self.distinct)


def latency_metrics(latency: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Every percentile summary (a dict with p50) in the latency result, by metric name."""
    out: dict[str, dict[str, Any]] = {}
    if not latency:
        return out

    def walk(d: dict[str, Any], prefix: str) -> None:
        for k, v in d.items():
            if isinstance(v, dict) and "p50" in v:
                out[prefix + k] = v
            elif isinstance(v, dict) and k not in ("samples", "config", "settings"):
                walk(v, prefix + k + ".")

    levels = pick(latency, "levels", "by_concurrency")
    if isinstance(levels, list) and levels:
        first = next((lv for lv in levels if pick(lv, "concurrency") in (1, None)), levels[0])
        walk(first, "")
    walk(latency, "")
    return out


def latency_level(latency: dict[str, Any] | None) -> dict[str, Any] | None:
    """The latency level the pages show: one request at a time (else the first level)."""
    levels = pick(latency, "levels", default=[])
    if not isinstance(levels, list) or not levels:
        return None
    return next((lv for lv in levels if isinstance(lv, dict) and pick(lv, "concurrency") in (1, None)), levels[0])


def latency_sweep(latency: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One row per concurrency level: TTFT, ITL (ms), aggregate tokens/s, and the client's own state.

    `saturated` is True where the suite's client was at its limit at that level (its event loop
    lagged or it used a whole core: `suite.stages.latency.ClientLoad`), False where it kept up,
    None where the record does not say (one request at a time, or a record from before).
    """
    rows: list[dict[str, Any]] = []
    levels = pick(latency, "levels", default=[])
    for lv in levels if isinstance(levels, list) else []:
        if not isinstance(lv, dict):
            continue

        def ms(key: str, q: str) -> float | None:
            v = as_float(pick(lv, f"{key}.{q}"))
            return None if v is None else v * 1000.0

        client = pick(lv, "client")
        rows.append({
            "concurrency": pick(lv, "concurrency", default=1),
            "requests": pick(lv, "requests"),
            "failed": pick(lv, "failed", default=0),
            "ttft_p50_ms": ms("ttft_s", "p50"), "ttft_p99_ms": ms("ttft_s", "p99"),
            "itl_p50_ms": ms("itl_s", "p50"), "itl_p99_ms": ms("itl_s", "p99"),
            "tokens_per_s": as_float(pick(lv, "throughput_tokens_per_s")),
            "lag_p99_ms": as_float(pick(client, "loop_lag_ms.p99")) if isinstance(client, dict) else None,
            "cpu_share": as_float(pick(client, "cpu_share")) if isinstance(client, dict) else None,
            "saturated": pick(client, "saturated") if isinstance(client, dict) else None,
            "reason": pick(client, "reason") if isinstance(client, dict) else None,
        })
    return sorted(rows, key=lambda r: r["concurrency"] or 0)


def _metric(metrics: dict[str, dict[str, Any]], *names: str) -> dict[str, Any] | None:
    for name in names:
        if name in metrics:
            return metrics[name]
    return None


def headline(s: Summary) -> Headline:
    h = Headline()
    prompts = gate_prompts(s.gate)
    if prompts:
        h.distinct = max((p.distinct or 0) for p in prompts)
        h.n = max((p.n or 0) for p in prompts) or None
    elif s.gate:
        h.distinct = pick(s.gate, "distinct_max", "distinct")
        h.n = pick(s.gate, "n", "requests")
    m = latency_metrics(s.latency)
    ttft = _metric(m, "ttft_s", "ttft", "ttft_ms")
    if ttft is not None and ttft.get("p50") is not None:
        h.ttft_p50_ms = float(ttft["p50"]) * (1 if "ttft_ms" in m else 1000.0)
    tps = _metric(m, "output_tokens_per_s", "tokens_per_s", "output_tps", "throughput_tokens_per_s")
    if tps is not None:
        h.tokens_per_s = as_float(tps.get("p50"))
    if s.extraction:
        h.clean_share, h.clean_share_se, h.clean_n = mean_se(pick(s.extraction, "clean_share", "clean"))
        h.complete_share, h.complete_share_se, h.complete_n = mean_se(pick(s.extraction, "complete_share"))
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


@dataclass
class ModelRuns:
    name: str
    arms: dict[str, ArmRuns] = field(default_factory=dict)
    page: str = ""

    @property
    def current(self) -> list[Run]:
        return [a.current for a in self.arms.values()]

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


STAGE_MODELS = {
    "gate": ("suite.stages.gate", "GateResult"),
    "controls": ("suite.stages.controls", "ControlsResult"),
    "latency": ("suite.stages.latency", "LatencyResult"),
    "extraction": ("suite.stages.extraction", "ExtractionResult"),
    "restarts": ("suite.stages.restarts", "RestartsResult"),
    "sessions": ("suite.stages.sessions", "SessionsResult"),
    "reloads": ("suite.stages.reloads", "ReloadsResult"),
    "watchdog": ("memwatch.report", "WatchdogReport"),
}


def stage_problems(models: dict[str, "ModelRuns"]) -> list[str]:
    """Stage results that do not match this suite's stage models, one line each (file, key, why).

    The pages still render them (the readers tolerate missing fields); the build reports them.
    """
    import importlib

    from pydantic import ValidationError

    validators = {}
    for key, (module, name) in STAGE_MODELS.items():
        try:
            validators[key] = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            log.debug("no stage model %s.%s to check %s results against", module, name, key)
    problems = []
    for m in models.values():
        for arm in m.arms.values():
            for run in arm.runs:
                for key, model in validators.items():
                    data = getattr(run.s, key)
                    if data is None:
                        continue
                    try:
                        model.model_validate(data)
                    except ValidationError as exc:
                        first = exc.errors()[0]
                        where = ".".join(str(p) for p in first["loc"])
                        problems.append(f"{run.run_dir / 'summary.json'}: {key}.{where}: {first['msg']}")
    return problems


def load_runs(results: Path) -> dict[str, ModelRuns]:
    if not results.is_dir():
        raise SuiteError(f"{results}: no such results folder; run `suite bench` first")
    return group_runs(results, load_all(results))


# --------------------------------------------------------------------------------------------
# Per-request records (requests.jsonl): answers of the gate, timings of the latency stage.
# --------------------------------------------------------------------------------------------

_KIND_PREFIX = re.compile(r'\{"kind": "([^"\\]*)"')


def read_requests(run_dir: Path, kinds: Iterable[str]) -> list[dict[str, Any]]:
    """The request records of these kinds from a run's requests.jsonl, in order."""
    path = run_dir / "requests.jsonl"
    wanted = set(kinds)
    out: list[dict[str, Any]] = []
    if not path.exists():
        return out
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            # records are written kind first: lines of other kinds are skipped without parsing
            head = _KIND_PREFIX.match(line)
            if head is not None and head.group(1) not in wanted:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                # the last line of an interrupted run may be cut short: skip it, say so
                log.warning("%s:%d: unreadable request line skipped", path, lineno)
                continue
            if isinstance(rec, dict) and rec.get("kind") in wanted:
                out.append(rec)
    return out


def request_prompt(rec: dict[str, Any]) -> str:
    return str(pick(rec, "prompt_id", "prompt", default="?"))


def request_text(rec: dict[str, Any]) -> str:
    text = pick(rec, "text", "completion.text", "output", default="")
    return text if isinstance(text, str) else json.dumps(text)


def request_tokens(rec: dict[str, Any]) -> list[int] | None:
    ids = pick(rec, "token_ids", "completion.token_ids")
    return ids if isinstance(ids, list) else None


def common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def analyse_requests(requests: list[dict[str, Any]]) -> dict[str, Any]:
    """A gate prompt result rebuilt from its request records (for a run whose gate never finished)."""
    from suite.analysis.repro import Sample, analyse

    samples = [Sample(index=int(pick(r, "index", default=i)), text=request_text(r),
                      token_ids=request_tokens(r), logprobs=pick(r, "logprobs"),
                      completion_tokens=pick(r, "completion_tokens"), error=pick(r, "error"))
               for i, r in enumerate(requests)]
    result = analyse(samples).model_dump(mode="json")
    result["distinct_answers"] = result.pop("distinct")
    return result


def itl_gaps(rec: dict[str, Any]) -> list[float]:
    times = pick(rec, "chunk_times_s", "completion.chunk_times_s", default=[])
    if not isinstance(times, list) or len(times) < 2:
        return []
    return [b - a for a, b in zip(times, times[1:]) if isinstance(a, (int, float)) and isinstance(b, (int, float))]


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


METRIC_LABELS = {
    "ttft": ("Time to first token", "ms"),
    "itl": ("Inter-token latency", "ms"),
    "tpot": ("Time per output token", "ms"),
    "e2e": ("End-to-end (to the last token)", "ms"),
    "stream_close": ("Request to the stream's close", "ms"),
    "prompt_tokens": ("Prompt tokens per request", "tokens"),
    "prompt_cached_tokens": ("Prompt tokens from the runtime's cache", "tokens"),
    "overhead": ("Client overhead (outside HTTP)", "ms"),
    "record": ("Writing the request record", "ms"),
    "tokens_per_s": ("Output tokens/s", "tok/s"),
    "output_tokens_per_s": ("Output tokens/s", "tok/s"),
    "output_tokens": ("Output tokens per request", "tokens"),
}


def metric_label(name: str) -> tuple[str, str, float]:
    """A metric key's label, unit and the factor that turns the stored value into that unit."""
    base = name.split(".")[-1]
    prefix = name[: -len(base)]
    if base.endswith("_ms"):
        key, factor, unit = base[:-3], 1.0, "ms"
    elif base.endswith("_s") and not base.endswith("per_s"):
        key, factor, unit = base[:-2], 1000.0, "ms"
    else:
        key, factor, unit = base, 1.0, ""
    if prefix == "runtime_timings." and key.endswith("_diff"):
        what = METRIC_LABELS.get(key[:-5], (key[:-5].upper(), ""))[0]
        return f"{what}: ours − the runtime's own", "ms", factor
    label, default_unit = METRIC_LABELS.get(key, (key.replace("_", " "), unit))
    return (prefix.replace(".", " ") + label).strip(), unit or default_unit, factor


@dataclass
class LatencyRow:
    label: str
    unit: str
    cells: list[dict[str, Any] | None]  # per arm: n, p50, p90, p99 in the unit


def latency_rows(runs: list[Run]) -> list[LatencyRow]:
    per_arm = [latency_metrics(r.s.latency) for r in runs]
    names: list[str] = []
    for m in per_arm:
        for k in m:
            if k not in names:
                names.append(k)
    rows = []
    for name in names:
        label, unit, factor = metric_label(name)
        cells: list[dict[str, Any] | None] = []
        for m in per_arm:
            d = m.get(name)
            if d is None:
                cells.append(None)
                continue
            cells.append({q: (None if d.get(q) is None else float(d[q]) * factor)
                          for q in ("p50", "p90", "p99", "mean", "min", "max")} | {"n": d.get("n")})
        rows.append(LatencyRow(label=label, unit=unit, cells=cells))
    return rows


def extraction_view(ex: dict[str, Any] | None) -> dict[str, Any] | None:
    """Identical sections, clean share, precision/recall, judge, and the per-section grid.

    Records with `comparable_sections` count identical sections only among those where every
    repeat gave valid JSON and mark a section with any invalid repeat as an error in the grid;
    older records keep their own reading (all-invalid sections as errors only).
    """
    if not ex:
        return None
    repeats = pick(ex, "repeats")
    grid: dict[str, str] = {}
    sections = pick(ex, "per_section", default=[])
    for sec in sections if isinstance(sections, list) else []:
        if not isinstance(sec, dict):
            continue
        sid = str(pick(sec, "section", "section_id", "id", default="?"))
        invalid = pick(sec, "invalid_json", default=0)
        if (repeats and invalid >= repeats) or pick(sec, "comparable") is False:
            grid[sid] = "error"
        elif pick(sec, "identical") is True:
            grid[sid] = "same"
        elif pick(sec, "identical") is False:
            grid[sid] = "changed"
        else:
            grid[sid] = "—"
    identical = pick(ex, "identical_sections")
    total = pick(ex, "sections")
    if not isinstance(total, int):
        total = len(grid) or None
    judge = pick(ex, "judge")
    per_repeat = pick(ex, "per_repeat", default=[])
    return {
        "identical": identical,
        "total": total,
        "comparable": pick(ex, "comparable_sections"),  # None: an older record (identical counted over all)
        "invalid_sections": pick(ex, "invalid_sections"),
        "changed_sections": pick(ex, "changed_sections"),
        "repeats": repeats,
        "mode": pick(ex, "mode"),
        "invalid_json": pick(ex, "invalid_json"),
        "requests": pick(ex, "requests"),
        "clean": mean_se(pick(ex, "clean_share")),
        "complete": mean_se(pick(ex, "complete_share")),
        "precision": mean_se(pick(ex, "precision")),
        "recall": mean_se(pick(ex, "recall")),
        "judge": mean_se(pick(judge, "score")) if isinstance(judge, dict) else (None, None, None),
        "judge_model": pick(judge, "model") if isinstance(judge, dict) else None,
        "judge_agreement": pick(judge, "agreement") if isinstance(judge, dict) else None,
        "judge_kappa": pick(judge, "kappa") if isinstance(judge, dict) else None,
        "judge_compared": pick(judge, "compared_facts") if isinstance(judge, dict) else None,
        "judge_graded": pick(judge, "graded_repeats") if isinstance(judge, dict) else None,
        "judge_reason": pick(judge, "graded_reason") if isinstance(judge, dict) else None,
        "per_repeat": [r for r in per_repeat if isinstance(r, dict)] if isinstance(per_repeat, list) else [],
        "grid": grid,
    }


def _section_scores(ex: dict[str, Any] | None, field_name: str) -> dict[str, float]:
    """Section -> the arm's per-section score (already averaged over repeats) from `per_section`."""
    out: dict[str, float] = {}
    rows = pick(ex, "per_section", default=[])
    for sec in rows if isinstance(rows, list) else []:
        if isinstance(sec, dict):
            v = as_float(sec.get(field_name))
            if v is not None:
                out[str(pick(sec, "section", "section_id", "id", default="?"))] = v
    return out


def _points(v: float) -> str:
    """A difference of shares in percentage points, signed ('+3.0', '−4.1')."""
    p = v * 100.0
    if abs(p) < 0.05:
        return "0.0"
    return f"{'+' if p > 0 else '−'}{abs(p):.1f}"


def paired_text(d: "PairedDifference") -> str:
    """One line for a paired difference, its n always shown; 'tie' only where the interval covers 0."""
    sections = f"n = {d.n} paired section{'' if d.n == 1 else 's'}"
    if d.mean is None:
        return f"no section answered by both arms ({sections})"
    if d.verdict == "too few":
        return f"{_points(d.mean)} points ({sections}: too few for an interval)"
    assert d.ci_low is not None and d.ci_high is not None
    se = f", SE {d.se * 100:.1f}" if d.se is not None else ""
    word = {"tie": "tie (the interval covers 0)", "higher": "higher", "lower": "lower"}[d.verdict]
    return (f"{_points(d.mean)} points{se}, {d.confidence * 100:.0f}% bootstrap interval "
            f"[{_points(d.ci_low)}, {_points(d.ci_high)}] ({sections}): {word}")


def extraction_pairs(exs: list[dict[str, Any] | None], arms: list[str]) -> list[dict[str, Any]]:
    """Every arm with an extraction result against the first such arm, as paired differences.

    Per section the arm's score averaged over its repeats; the difference (arm minus the first)
    over the sections both answered; mean, SE and a seeded bootstrap 95% interval. Measures:
    clean and complete (clean where either record predates it), recall, and the judge's score
    where both arms were judged with per-section scores. Empty with fewer than two such arms.
    """
    ran = [(arm, ex) for arm, ex in zip(arms, exs) if isinstance(ex, dict) and ex]
    if len(ran) < 2:
        return []
    base_arm, base = ran[0]
    out: list[dict[str, Any]] = []
    for arm, ex in ran[1:]:
        rows: list[dict[str, Any]] = []
        a, b = _section_scores(base, "complete_rate"), _section_scores(ex, "complete_rate")
        if a and b:
            rows.append({"measure": "clean and complete", "diff": paired_difference(a, b)})
        else:
            rows.append({"measure": "clean (missing facts allowed; an older record lacks 'complete')",
                         "diff": paired_difference(_section_scores(base, "clean_rate"),
                                                   _section_scores(ex, "clean_rate"))})
        rows.append({"measure": "recall", "diff": paired_difference(_section_scores(base, "recall"),
                                                                    _section_scores(ex, "recall"))})
        ja, jb = pick(base, "judge.per_section"), pick(ex, "judge.per_section")
        if isinstance(ja, dict) and isinstance(jb, dict) and ja and jb:
            fa = {str(k): v for k, v in ((k, as_float(v)) for k, v in ja.items()) if v is not None}
            fb = {str(k): v for k, v in ((k, as_float(v)) for k, v in jb.items()) if v is not None}
            rows.append({"measure": "judge score", "diff": paired_difference(fa, fb)})
        for row in rows:
            row["text"] = paired_text(row["diff"])
        out.append({"arm": arm, "against": base_arm, "rows": rows})
    return out


def controls_view(c: dict[str, Any] | None, prompt_ids: list[str]) -> dict[str, Any] | None:
    """The control matrix: one row per configuration, distinct answers per gate prompt."""
    if not c:
        return None
    rows = []
    prompts = [str(p) for p in pick(c, "prompts", default=[])] or prompt_ids
    for r in pick(c, "rows", default=[]):
        if not isinstance(r, dict):
            continue
        distinct = pick(r, "distinct", default={})
        answered = pick(r, "answered", default={})
        lengths = pick(r, "lengths", default={})
        cells = []
        for pid in prompts:
            d = distinct.get(pid) if isinstance(distinct, dict) else None
            cells.append(None if d is None else {
                "distinct": d, "answered": answered.get(pid) if isinstance(answered, dict) else None,
                "lengths": lengths.get(pid) if isinstance(lengths, dict) else None})
        rows.append({
            "configuration": str(pick(r, "configuration", default="?")),
            "description": pick(r, "description", default=""),
            "status": str(pick(r, "status", default="?")),
            "reason": pick(r, "reason"),
            "concurrency": pick(r, "concurrency", default=1),
            "startup_s": pick(r, "startup_s"),
            "reproducible": pick(r, "reproducible"),
            "cells": cells,
            "ran_controls": [str(x) for x in pick(r, "ran_controls", default=[]) or []],
            "env": {str(k): str(v) for k, v in (pick(r, "env", default={}) or {}).items()},
            "args": [str(x) for x in pick(r, "args", default=[]) or []],
            "tokens_per_s": pick(r, "tokens_per_s"),
        })
    lora = pick(c, "lora")
    default_tps = next((row["tokens_per_s"] for row in rows if row["configuration"] == "default"), None)
    for row in rows:
        tps = row["tokens_per_s"]
        row["cost"] = (tps / default_tps) if isinstance(tps, (int, float)) and isinstance(default_tps, (int, float)) \
            and default_tps > 0 else None
    return {"prompts": prompts, "rows": rows, "n": pick(c, "n_requests"),
            "elimination": pick(c, "elimination", default=""), "automatic": pick(c, "automatic", default=False),
            "restoring": pick(c, "restoring", default=[]), "spread_prompts": pick(c, "spread_prompts", default=[]),
            "by_conf": {row["configuration"]: row for row in rows},
            "lora": lora if isinstance(lora, dict) else None}


def restarts_view(r: dict[str, Any] | None) -> dict[str, Any] | None:
    """Within-launch stability and across-launch consistency, with the agreement's 95% interval."""
    if not r:
        return None
    prompts = []
    for p in pick(r, "prompts", default=[]):
        if not isinstance(p, dict):
            continue
        ci = pick(p, "agreement_ci95")
        prompts.append({
            "prompt_id": str(pick(p, "prompt_id", default="?")),
            "within": pick(p, "within_distinct", default=[]),
            "across": pick(p, "across_distinct"),
            "agreement": pick(p, "agreement"),
            "ci": tuple(ci) if isinstance(ci, (list, tuple)) and len(ci) == 2 else None,
            "lengths": pick(p, "lengths_text", default=""),
            "errors": pick(p, "errors", default=0),
            "ci_note": pick(p, "ci_note"),
            "pairs": [x for x in pick(p, "pairs", default=[]) if isinstance(x, dict)],
            "logprob_diff": pick(p, "across_logprob_diff"),
            "logprobs_apart": bool(pick(p, "same_tokens_logprobs_apart", default=False)),
        })
    outcomes = [{"index": pick(o, "index"), "status": pick(o, "status"), "reason": pick(o, "reason"),
                 "startup_s": pick(o, "startup_s"), "cache_files_before": pick(o, "cache_files_before")}
                for o in pick(r, "launch_outcomes", default=[]) if isinstance(o, dict)]
    return {
        "launches": pick(r, "launches"), "launched": pick(r, "launched"),
        "per_launch": pick(r, "requests_per_launch"), "stable_within": pick(r, "stable_within"),
        "consistent_across": pick(r, "consistent_across"), "verdict": pick(r, "verdict", default=""),
        "within_verdict": pick(r, "within_verdict", default=""), "across_verdict": pick(r, "across_verdict", default=""),
        "prompts": prompts, "outcomes": outcomes, "by_prompt": {p["prompt_id"]: p for p in prompts},
        "startup": [o["startup_s"] for o in outcomes if isinstance(o["startup_s"], (int, float))],
        "cache_mode": pick(r, "cache_mode"),
        "kept": restarts_view(pick(r, "with_kept_caches")),
    }


def watchdog_view(wd: dict[str, Any] | None) -> dict[str, Any] | None:
    if not wd:
        return None
    trip = pick(wd, "trip")
    probes = pick(wd, "probes", default=[])
    peaks = pick(wd, "peaks", default={})
    return {
        "tripped": bool(pick(wd, "tripped", default=trip is not None)),
        "trip": trip,
        "samples": pick(wd, "sample_count"),
        "duration_s": pick(wd, "duration_s"),
        "interval_s": pick(wd, "mean_interval_s", "policy.interval_s"),
        "cpu_pct": pick(wd, "cpu_pct_of_core"),
        "policy": pick(wd, "policy", default={}),
        "probes": probes if isinstance(probes, list) else [],
        "peaks_gib": {k: v / 2**30 for k, v in peaks.items() if isinstance(v, (int, float)) and k.endswith("_bytes")},
        "baselines_gib": {k: v / 2**30 for k, v in pick(wd, "baselines", default={}).items()
                          if isinstance(v, (int, float)) and k.endswith("_bytes")},
        "events": pick(wd, "events", default=[]),
    }


def arm_comparisons(runs: list["Run"], arms: list[str]) -> list[dict[str, Any]]:
    """Each arm's modal answers against the first arm's, per gate prompt (the same weights in
    two formats or on two runtimes answering alike or not, and where they part)."""
    from suite.compare import compare_gates

    if len(runs) < 2:
        return []
    base = runs[0]
    out = []
    for arm, run in zip(arms[1:], runs[1:]):
        prompts = compare_gates(base.s.gate, run.s.gate)
        if prompts:
            out.append({"base": arms[0], "arm": arm, "prompts": prompts,
                        "agree": sum(1 for p in prompts if p.modal_agree), "n": len(prompts)})
    return out


def sessions_view(r: dict[str, Any] | None) -> dict[str, Any] | None:
    """Sessions x replicates: per configuration and prompt, distinct in K*R runs and the agreements."""
    if not r:
        return None
    configs = []
    for c in pick(r, "configurations", default=[]):
        if not isinstance(c, dict):
            continue
        configs.append({"label": pick(c, "label", default="?"), "status": pick(c, "status", default="ok"),
                        "reason": pick(c, "reason"),
                        "prompts": [p for p in pick(c, "prompts", default=[]) if isinstance(p, dict)]})
    return {"sessions": pick(r, "sessions"), "replicates": pick(r, "replicates"), "launched": pick(r, "launched"),
            "configurations": configs, "table": pick(r, "table", default=[]),
            "outcomes": [o for o in pick(r, "outcomes", default=[]) if isinstance(o, dict) and pick(o, "status") != "ok"]}

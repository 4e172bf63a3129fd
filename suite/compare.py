"""Two runs compared: do they give the same answers, where do they part, and what differs between them.

`suite compare RUN_A RUN_B` and the model page's cross-arm view both use `compare_gates`: per gate
prompt the two runs' modal answers (the most common answer of each run's N requests) are compared
by token ids where both carry them, else by text; where they part, the first token and character,
a few characters of each around it, and the largest logprob difference over the tokens they share
before parting. `compare_runs` adds the configuration signature's fields that differ (runtime
version, image digest, controls, hardware, ...): how a user answers "did upgrading the runtime
change the answers?" or "does this machine answer like that one?". Pure functions over records;
the CLI prints, the site renders.
"""

from __future__ import annotations

import logging
from pathlib import Path
from pydantic import BaseModel, Field

from suite.errors import SuiteError
from suite.records import Summary, incomplete_summary, iter_run_dirs, load_summary
from suite.analysis.repro import Sample, first_diff, prefix_logprob_diff
from suite.signature import flatten_signature
from suite.stages.gate import GatePromptResult, GateResult

log = logging.getLogger(__name__)

# Signature fields that always differ between two runs and say nothing about the configuration.
_NOT_CONFIGURATION = {"digest", "created_at", "run_id"}


class RunRef(BaseModel):
    run_id: str
    model: str
    arm: str
    runtime: str
    started_at: str


class PromptComparison(BaseModel):
    """One gate prompt's modal answers in two runs."""

    prompt_id: str
    same_prompt: bool  # the prompt file's hash matched (False: the prompt changed between the runs)
    a_distinct: int | None
    b_distinct: int | None
    a_answered: int | None
    b_answered: int | None
    compared_by: str  # token_ids | text
    modal_agree: bool | None  # None: one run has no answer to this prompt
    token_index: int | None = None  # first token where the modal answers part
    char_index: int | None = None
    a_context: str = ""
    b_context: str = ""
    a_tokens: int | None = None
    b_tokens: int | None = None
    logprob_diff: float | None = None  # largest |Δ logprob| over the shared tokens (nats)

    @property
    def summary(self) -> str:
        if self.modal_agree is None:
            return "no answer in one run"
        if self.modal_agree:
            lp = f"; logprobs within {self.logprob_diff:.3g} nats" if self.logprob_diff is not None else ""
            return f"same modal answer ({self.a_tokens} tokens{lp})"
        where = f"token {self.token_index}" if self.token_index is not None else f"character {self.char_index}"
        return f"modal answers part at {where}: {self.a_context!r} vs {self.b_context!r}"


class SignatureDiff(BaseModel):
    key: str
    a: str
    b: str


class RunComparison(BaseModel):
    a: RunRef
    b: RunRef
    prompts: list[PromptComparison]
    signature_diff: list[SignatureDiff] = Field(default_factory=list)
    verdict: str


def _modal(p: GatePromptResult) -> Sample | None:
    if not p.answers:
        return None
    a = p.answers[0]
    return Sample(index=0, text=a.text, token_ids=a.token_ids, logprobs=a.logprobs)


def compare_prompt(pa: GatePromptResult, pb: GatePromptResult) -> PromptComparison:
    """The modal answers of one prompt in two gate results."""
    ma, mb = _modal(pa), _modal(pb)
    ids_a = ma.ids_or_empty() if ma else None
    ids_b = mb.ids_or_empty() if mb else None
    by = "token_ids" if ids_a is not None and ids_b is not None else "text"
    out = PromptComparison(
        prompt_id=pa.prompt_id, same_prompt=pa.prompt_sha256 == pb.prompt_sha256,
        a_distinct=pa.distinct_answers, b_distinct=pb.distinct_answers,
        a_answered=pa.answered, b_answered=pb.answered, compared_by=by, modal_agree=None)
    if ma is None or mb is None:
        return out
    out.a_tokens, out.b_tokens = ma.n_tokens, mb.n_tokens
    out.modal_agree = (ids_a == ids_b) if by == "token_ids" else (ma.text == mb.text)
    out.logprob_diff = prefix_logprob_diff(ma, mb)
    if not out.modal_agree:
        ci = first_diff(ma.text, mb.text)
        out.char_index = ci
        out.a_context, out.b_context = ma.text[max(0, ci - 12): ci + 12], mb.text[max(0, ci - 12): ci + 12]
        if by == "token_ids" and ids_a is not None and ids_b is not None:
            out.token_index = first_diff(ids_a, ids_b)
    return out


def compare_gates(gate_a: GateResult | None, gate_b: GateResult | None) -> list[PromptComparison]:
    """Per gate prompt both runs answered, their modal answers compared (in run A's prompt order)."""
    if gate_a is None or gate_b is None:
        return []
    by_id = {p.prompt_id: p for p in gate_b.prompts}
    return [compare_prompt(p, by_id[p.prompt_id]) for p in gate_a.prompts if p.prompt_id in by_id]


def _ref(s: Summary) -> RunRef:
    return RunRef(run_id=s.run_id, model=s.model, arm=s.arm, runtime=s.runtime, started_at=s.started_at)


def resolve_run(ref: str, results: Path) -> Path:
    """A run folder from a path, a run id, or a unique prefix of one, under `results`."""
    path = Path(ref)
    if (path / "run.json").exists():
        return path
    matches = [d for d in iter_run_dirs(results) if d.name == ref or d.name.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise SuiteError(f"run {ref!r}: no such run folder, and no run id under {results} starts with it")
    raise SuiteError(f"run {ref!r}: {len(matches)} runs under {results} start with it; give more of the id")


def _summary(run_dir: Path) -> Summary:
    path = run_dir / "summary.json"
    return load_summary(path) if path.exists() else incomplete_summary(run_dir)


def compare_summaries(a: Summary, b: Summary, across_models: bool = False) -> RunComparison:
    """Two runs of one model: answers prompt by prompt, and the signature fields that differ.

    `across_models`: two cards of the same weights (the tiny model on CPU arms and on a GPU card)."""
    if a.model != b.model and not across_models:
        raise SuiteError(f"runs {a.run_id} and {b.run_id} are of different models ({a.model!r}, {b.model!r}): "
                         "compare runs of one model (or, for two cards of the same weights, --across-models)")
    prompts = compare_gates(a.gate, b.gate)
    fa, fb = flatten_signature(a.signature), flatten_signature(b.signature)
    diff = [SignatureDiff(key=k, a=fa.get(k, "—"), b=fb.get(k, "—"))
            for k in dict.fromkeys([*fa, *fb]) if k not in _NOT_CONFIGURATION and fa.get(k) != fb.get(k)]
    if not prompts:
        verdict = "no gate prompt answered in both runs"
    else:
        agree = [p for p in prompts if p.modal_agree]
        parted = [p for p in prompts if p.modal_agree is False]
        verdict = (f"the same modal answer on {len(agree)} of {len(prompts)} prompts"
                   + (f"; they part on {', '.join(p.prompt_id for p in parted)}" if parted else ""))
        changed = [p.prompt_id for p in prompts if not p.same_prompt]
        if changed:
            verdict += f" (the prompt file changed between the runs: {', '.join(changed)})"
    return RunComparison(a=_ref(a), b=_ref(b), prompts=prompts, signature_diff=diff, verdict=verdict)


def compare_runs(ref_a: str, ref_b: str, results: Path, across_models: bool = False) -> RunComparison:
    return compare_summaries(_summary(resolve_run(ref_a, results)), _summary(resolve_run(ref_b, results)),
                             across_models)

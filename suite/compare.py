"""Two runs compared: do they give the same answers, where do they part, and what differs between them.

`suite compare RUN_A RUN_B` and the model page's cross-arm view both use `compare_gates`: per gate
prompt the two runs' modal answers (the most common answer of each run's N requests) are compared
by token ids where both carry them, else by text; where they part, the first token and character,
a few characters of each around it, and the largest logprob difference over the tokens they share
before parting. A run whose most common answer is tied has no modal answer: that prompt is
"tied", not compared by modal (the answers the two runs share are still counted). An answer cut at
max_tokens is compared only up to its cap: two cut answers alike are "the same up to the cap",
and one cut answer that is the start of the other (the runs had different caps) is "the same up
to the cap", never "parted". `compare_runs` adds the configuration signature's fields that differ (runtime
version, image digest, controls, hardware, ...): how a user answers "did upgrading the runtime
change the answers?" or "does this machine answer like that one?". Pure functions over records;
the CLI prints, the site renders.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from suite.analysis.repro import Sample, answer_key, first_diff, prefix_logprob_diff
from suite.errors import SuiteError
from suite.records import Summary, has_record, incomplete_summary, iter_run_dirs, load_summary, short_id_of
from suite.signature import flatten_signature
from suite.stages import VERDICT_STAGE
from suite.stages.gate_models import GatePromptResult, GateResult

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
    a_tied: bool = False  # run A's most common answer is tied: no modal answer
    b_tied: bool = False
    a_cut: bool = False  # run A's modal answer stopped at max_tokens
    b_cut: bool = False
    a_max_tokens: int | None = None
    b_max_tokens: int | None = None
    # "tied": a run has no modal answer; "cap": the modal answers agree up to the cap where one
    # (or both) was cut, they may differ past it; None: compared in full.
    caveat: Literal["tied", "cap"] | None = None
    shared_answers: int | None = None  # distinct answers both runs gave (of each run's distinct answers)
    a_prompt_tokens: list[int] = Field(default_factory=list)  # the prompt's token counts each runtime reported
    b_prompt_tokens: list[int] = Field(default_factory=list)

    @property
    def tokens_differ(self) -> bool:
        """Both runtimes reported the prompt's length, and not the same: they read different input
        (another tokenizer, template or BOS), so their answers are not answers to the same tokens."""
        return bool(self.a_prompt_tokens and self.b_prompt_tokens and self.a_prompt_tokens != self.b_prompt_tokens)

    def _input_note(self) -> str:
        if not self.tokens_differ:
            return ""
        return (f" (the runtimes read the prompt as different tokens: {'/'.join(map(str, self.a_prompt_tokens))} "
                f"against {'/'.join(map(str, self.b_prompt_tokens))})")

    @property
    def summary(self) -> str:
        return self._summary() + self._input_note()

    def _summary(self) -> str:
        if self.caveat == "tied":
            which = " and ".join(r for r, t in (("A", self.a_tied), ("B", self.b_tied)) if t)
            return (f"no modal answer in run {which} (its most common answers are tied): not compared by modal; "
                    f"{self.shared_answers} answer(s) given in both runs")
        if self.modal_agree is None and self.caveat is None:
            return "no answer in one run"
        cut = ""
        if self.a_cut or self.b_cut:
            caps = sorted({c for c, x in ((self.a_max_tokens, self.a_cut), (self.b_max_tokens, self.b_cut)) if x and c})
            cut = f"; cut at {' and '.join(map(str, caps)) or 'the'} tokens: they may differ past the cap"
        if self.caveat == "cap":
            return f"the same up to the cap ({min(self.a_tokens or 0, self.b_tokens or 0)} tokens){cut}"
        if self.modal_agree:
            lp = f"; logprobs within {self.logprob_diff:.3g} nats" if self.logprob_diff is not None else ""
            return f"same modal answer ({self.a_tokens} tokens{lp}){cut}"
        where = f"token {self.token_index}" if self.token_index is not None else f"character {self.char_index}"
        return f"modal answers part at {where}: {self.a_context!r} vs {self.b_context!r}"


class SignatureDiff(BaseModel):
    key: str
    a: str
    b: str


# The comparison's closed vocabulary: its word, beside the sentence (`RunComparison.verdict`).
CompareWord = Literal["nothing compared", "the same modal answers", "the same up to the cap", "they part",
                      "undetermined"]


class RunComparison(BaseModel):
    a: RunRef
    b: RunRef
    prompts: list[PromptComparison]
    signature_diff: list[SignatureDiff] = Field(default_factory=list)
    word: CompareWord = "undetermined"  # nothing compared, alike, alike up to a cap, parted, or tied
    verdict: str
    # Which machines ran the two (host, GPUs, driver: beside the signature, not in its digest), and
    # what that means for the verdict: one configuration on two machines that parts is a finding.
    machines: str | None = None
    same_configuration: bool | None = None  # the two signatures' digests are equal


def _as_sample(a) -> Sample:
    return Sample(index=0, text=a.text, token_ids=a.token_ids, logprobs=a.logprobs)


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
        a_answered=pa.answered, b_answered=pb.answered, compared_by=by, modal_agree=None,
        a_tied=pa.modal_tied, b_tied=pb.modal_tied, a_max_tokens=pa.max_tokens, b_max_tokens=pb.max_tokens,
        a_cut=bool(pa.answers and pa.answers[0].truncated), b_cut=bool(pb.answers and pb.answers[0].truncated),
        a_prompt_tokens=pa.prompt_tokens, b_prompt_tokens=pb.prompt_tokens)
    if ma is None or mb is None:
        return out
    keys_a = {answer_key(_as_sample(a), by) for a in pa.answers}
    out.shared_answers = sum(1 for a in pb.answers if answer_key(_as_sample(a), by) in keys_a)
    out.a_tokens, out.b_tokens = ma.n_tokens, mb.n_tokens
    if out.a_tied or out.b_tied:  # no modal answer on one side: the first of the tied is arbitrary
        out.caveat = "tied"
        return out
    out.modal_agree = (ids_a == ids_b) if by == "token_ids" else (ma.text == mb.text)
    out.logprob_diff = prefix_logprob_diff(ma, mb)
    if out.modal_agree and (out.a_cut or out.b_cut):
        out.caveat = "cap"
    elif not out.modal_agree and (out.a_cut or out.b_cut):
        # One answer stopped at its cap and is the start of the other: they agree as far as both go.
        x, y = (ids_a, ids_b) if by == "token_ids" and ids_a is not None and ids_b is not None else (ma.text, mb.text)
        shared = first_diff(x, y)
        if (out.a_cut and shared == len(x)) or (out.b_cut and shared == len(y)):
            out.modal_agree, out.caveat = None, "cap"
            return out
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
    """A run folder from a path, a run id, a unique prefix of one, or the 8-character id printed for
    a run (the run id's tail, `90e5d744`; a unique prefix of it too), under `results`. No match,
    or more than one, is one line (the ids that match, to choose from)."""
    path = Path(ref)
    if (path / "run.json").exists():
        return path
    dirs = iter_run_dirs(results)
    exact = [d for d in dirs if d.name == ref or short_id_of(d.name) == ref]
    # a run's own short id (or a prefix), or a prefix of its run id; the run id's tail (its
    # configuration's signature, shared by reruns) only where nothing else matches
    matches = exact or [d for d in dirs if ref and (d.name.startswith(ref) or short_id_of(d.name).startswith(ref))] \
        or [d for d in dirs if ref and d.name.rsplit("-", 1)[-1].startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise SuiteError(f"run {ref!r}: no such run folder, and no run id under {results} starts or ends with it")
    shown = ", ".join(f"{d.parent.parent.name}/{d.parent.name}/{d.name}" for d in matches[:3]) + (", ..." if len(matches) > 3 else "")
    raise SuiteError(f"run {ref!r} is ambiguous: {len(matches)} runs under {results} match it ({shown}); "
                     "give more of the run id")


def _summary(run_dir: Path) -> Summary:
    path = run_dir / "summary.json"
    return load_summary(path) if has_record(path) else incomplete_summary(run_dir)


def compare_summaries(a: Summary, b: Summary, across_models: bool = False) -> RunComparison:
    """Two runs of one model: answers prompt by prompt, and the signature fields that differ.

    `across_models`: two cards of the same weights (the tiny model on CPU arms and on a GPU card)."""
    if a.model != b.model and not across_models:
        raise SuiteError(f"runs {a.run_id} and {b.run_id} are of different models ({a.model!r}, {b.model!r}): "
                         "compare runs of one model (or, for two cards of the same weights, --across-models)")
    (gate_a, from_a), (gate_b, from_b) = answers_of(a), answers_of(b)
    prompts = compare_gates(gate_a, gate_b)
    fa, fb = flatten_signature(a.signature), flatten_signature(b.signature)
    diff = [SignatureDiff(key=k, a=fa.get(k, "—"), b=fb.get(k, "—"))
            for k in dict.fromkeys([*fa, *fb]) if k not in _NOT_CONFIGURATION and not k.startswith("machine")
            and fa.get(k) != fb.get(k)]
    # the suite's code that wrote each run: beside the signature (not in its digest), named where it differs
    for field in ("commit", "modified"):
        va, vb = (str(getattr(x.suite, field)) if x.suite is not None else "—" for x in (a, b))
        if va != vb:
            diff.append(SignatureDiff(key=f"suite.{field} (beside the signature)", a=va, b=vb))
    word: CompareWord = "nothing compared"
    if not prompts:
        verdict = "no gate prompt answered in both runs"
    else:
        agree = [p for p in prompts if p.modal_agree and p.caveat is None]
        parted = [p for p in prompts if p.modal_agree is False]
        to_cap = [p for p in prompts if p.caveat == "cap"]
        tied = [p for p in prompts if p.caveat == "tied"]
        both = [p for p in prompts if p.a_answered and p.b_answered]
        word = ("nothing compared" if not both else "they part" if parted else
                "undetermined" if tied or len(agree) + len(to_cap) < len(prompts) else
                "the same up to the cap" if to_cap else "the same modal answers")
        verdict = (f"the same modal answer on {len(agree)} of {len(prompts)} prompts"
                   + (f"; the same up to the token cap (cut there, may differ past it) on "
                      f"{', '.join(p.prompt_id for p in to_cap)}" if to_cap else "")
                   + (f"; no modal answer (tied) on {', '.join(p.prompt_id for p in tied)}" if tied else "")
                   + (f"; they part on {', '.join(p.prompt_id for p in parted)}" if parted else ""))
        borrowed = [f"run {r} from {w}" for r, w in (("A", from_a), ("B", from_b)) if w != VERDICT_STAGE]
        if borrowed:
            verdict += f" ({'; '.join(borrowed)}: the same requests as the gate's, one at a time)"
        changed = [p.prompt_id for p in prompts if not p.same_prompt]
        if changed:
            verdict += f" (the prompt file changed between the runs: {', '.join(changed)})"
        other_input = [p for p in prompts if p.tokens_differ]
        if other_input:
            verdict += ("; the runtimes read the prompt as different tokens on "
                        + ", ".join(f"{p.prompt_id} ({'/'.join(map(str, p.a_prompt_tokens))} against "
                                    f"{'/'.join(map(str, p.b_prompt_tokens))})" for p in other_input)
                        + ": another tokenizer, template or BOS, so those answers are not to the same input")
    # one configuration: the digests of the configuration, made again from the fields (a record
    # written before the launch port was left out of the digest compares by it too)
    same = (a.signature.configuration_digest() == b.signature.configuration_digest()) \
        if a.signature is not None and b.signature is not None else None
    return RunComparison(a=_ref(a), b=_ref(b), prompts=prompts, signature_diff=diff, word=word, verdict=verdict,
                         machines=machine_note(a.signature, b.signature, same,
                                               [p.prompt_id for p in prompts if p.modal_agree is False],
                                               compared=bool(prompts),
                                               tied=[p.prompt_id for p in prompts if p.caveat == "tied"]),
                         same_configuration=same)


def answers_of(s: Summary) -> tuple[GateResult | None, str]:
    """The one-at-a-time answers a run holds, and where they come from: its gate; else, where only
    a control matrix ran (a matrix run a few rows at a time), the matrix's default row, the gate's
    requests sent by the matrix (its first launch)."""
    if s.gate is not None:
        return s.gate, VERDICT_STAGE
    rows = s.controls.rows if s.controls is not None else []
    default = next((r for r in rows if r.configuration == "default" and r.gate is not None), None)
    if default is not None:
        return default.gate, "the control matrix's default row"
    return None, VERDICT_STAGE


def _machine_words(m: Any) -> str:
    gpus = ", ".join(f"{n} {u}" for n, u in zip(m.gpu_names, m.gpu_uuids, strict=False)) or "no NVIDIA GPU"
    return f"{m.host} ({gpus}{f', driver {m.gpu_driver}' if m.gpu_driver else ''})"


def machine_note(sa: Any, sb: Any, same: bool | None, parted: list[str], compared: bool = True,
                 tied: list[str] | None = None) -> str | None:
    """Which machines ran the two runs and what it means: one machine; or two machines, of one GPU
    model and driver or not, with the same configuration or not. None where a run does not say.
    `compared`: whether any prompt was compared (nothing compared says nothing of agreement); `tied`:
    the prompts without a modal answer in a run (not compared by modal: agreement not claimed there)."""
    ma, mb = getattr(sa, "machine", None), getattr(sb, "machine", None)
    if ma is None or mb is None:
        return None
    if ma.host == mb.host and ma.gpu_uuids == mb.gpu_uuids:
        return f"one machine: {_machine_words(ma)}"
    alike = ma.gpu_names == mb.gpu_names and ma.gpu_driver == mb.gpu_driver
    head = (f"two machines{' of one GPU model and driver' if alike else ''}: A {_machine_words(ma)}; "
            f"B {_machine_words(mb)}")
    if not same:
        return head + "; their configurations differ (see the fields that differ)"
    if not compared:
        return head + "; one configuration (the same digest); no answers compared"
    if parted:
        return (head + f"; one configuration (the same digest), and the answers part on {', '.join(parted)}: "
                + ("a difference between machines of one GPU model and driver" if alike else
                   "a difference between these machines"))
    if tied:
        return (head + "; one configuration (the same digest), and the modal answers agree where compared; "
                f"no modal answer to compare (tied) on {', '.join(tied)}")
    return head + "; one configuration (the same digest), and the answers agree"


def compare_runs(ref_a: str, ref_b: str, results: Path, across_models: bool = False) -> RunComparison:
    return compare_summaries(_summary(resolve_run(ref_a, results)), _summary(resolve_run(ref_b, results)),
                             across_models)

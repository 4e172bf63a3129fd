"""The gate's records, apart from the engine that sends its requests (`suite.stages.repeat`): the
gate prompts (`prompts/gate/*.toml`, `GatePrompt`, loaded and selected by `select_prompts`), one
gate run's result (`GateResult`, one `GatePromptResult` per prompt) with its verdict
(`verdict_of`), and the pure functions the readers of a record use on it (`samples_of`,
`truncation_by_prompt`). Nothing here sends a request: the record store, the site and the export
read a gate's result with this module alone.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from suite.analysis.levels import CONFIDENCE, percent
from suite.analysis.repro import PromptAnalysis, Sample, unseen_share_bound
from suite.definitions import load_validated
from suite.errors import SuiteError
from suite.paths import PROMPTS_DIR

GATE_DIR = PROMPTS_DIR / "gate"


# -- prompts --------------------------------------------------------------------------------------

class GatePrompt(BaseModel):
    """One gate prompt file: `prompts/gate/<id>.toml`."""

    model_config = ConfigDict(extra="forbid")

    id: str
    version: int
    kind: Literal["completion", "chat"] = "completion"
    max_tokens: int = Field(gt=0)  # the answer's natural length; the profile may cap it
    description: str = ""
    prompt: str = Field(min_length=1)
    sha256: str = ""  # of the file, set by the loader


def load_gate_prompt(path: Path) -> GatePrompt:
    prompt = load_validated(path, GatePrompt)
    if prompt.id != path.stem:
        raise SuiteError(f"{path}: id {prompt.id!r} differs from the file name {path.stem!r}")
    return prompt.model_copy(update={"sha256": hashlib.sha256(path.read_bytes()).hexdigest()})


def load_gate_prompts(directory: Path | None = None) -> dict[str, GatePrompt]:
    root = directory or GATE_DIR
    prompts = {p.id: p for p in (load_gate_prompt(f) for f in sorted(root.glob("*.toml")))}
    if not prompts:
        raise SuiteError(f"{root}: no gate prompts (*.toml)")
    return prompts


def select_prompts(wanted: list[str] | None, directory: Path | None = None) -> list[GatePrompt]:
    """The profile's gate prompts (None: all of them), in a stable order."""
    prompts = load_gate_prompts(directory)
    if wanted is None:
        return list(prompts.values())
    unknown = [w for w in wanted if w not in prompts]
    if unknown:
        raise SuiteError(f"unknown gate prompt {unknown[0]!r}; known: {', '.join(prompts)}")
    return [prompts[w] for w in wanted]


# -- results --------------------------------------------------------------------------------------

class GatePromptResult(PromptAnalysis):
    """One gate prompt's result: the analysis of its series (suite.analysis.repro) and the prompt."""

    prompt_id: str
    prompt_version: int
    prompt_sha256: str
    kind: str
    max_tokens: int
    error_messages: list[str] = Field(default_factory=list)  # first few distinct errors
    stopped_reason: str | None = None
    # The prompt's length in tokens as the runtime reported it (each distinct count, answered
    # requests; empty where it reports none): two runtimes that read the prompt as different
    # tokens answer different input (suite.compare says so).
    prompt_tokens: list[int] = Field(default_factory=list)

    @classmethod
    def from_analysis(cls, a: PromptAnalysis, *, prompt_id: str, prompt_version: int = 1, prompt_sha256: str = "",
                      kind: str = "completion", max_tokens: int, error_messages: list[str] | None = None,
                      stopped_reason: str | None = None, prompt_tokens: list[int] | None = None) -> GatePromptResult:
        """One prompt's result from the analysis of its series."""
        return cls(prompt_id=prompt_id, prompt_version=prompt_version, prompt_sha256=prompt_sha256, kind=kind,
                   max_tokens=max_tokens, error_messages=error_messages or [], stopped_reason=stopped_reason,
                   prompt_tokens=prompt_tokens or [], **a.model_dump())


class GateResult(BaseModel):
    """One gate run: per prompt the distinct answers, and the arm-level verdict."""

    label: str = "default"  # configuration: default, a control, or a LoRA adapter
    controls: list[str] = Field(default_factory=list)
    model: str | None = None  # the served model or adapter name the requests named
    n_requests: int
    concurrency: int = 1
    request_extra: dict[str, Any] = Field(default_factory=dict)  # the fields every request carried besides the prompt
    seed: int | None
    temperature: float
    logprobs: bool
    prompts: list[GatePromptResult]
    reproducible: bool | None  # False: >1 distinct answer on a prompt; None: not enough answers
    verdict: str
    stopped_reason: str | None = None
    wall_s: float
    http_s: float  # time inside the HTTP exchanges (sum of the requests' end-to-end)
    overhead_ms_per_request: float | None = None  # the suite's own time per request (one at a time)

    @property
    def max_distinct(self) -> int:
        return max((p.distinct_answers for p in self.prompts), default=0)


def _answered(p: GatePromptResult) -> str:
    """`20` or, with failures, `5 answered of 20`."""
    return str(p.answered) if p.answered == p.requests else f"{p.answered} answered of {p.requests}"


def truncation_note(p: GatePromptResult) -> str | None:
    """`20 of 20 cut at 256 tokens: answers may differ past the cap`, when any answer hit it."""
    if not p.truncated:
        return None
    return f"{p.prompt_id}: {p.truncated} of {p.answered} cut at {p.max_tokens} tokens: answers may differ past the cap"


def verdict_of(prompts: list[GatePromptResult], stopped: str | None,
               needed: int | None = None) -> tuple[bool | None, str]:
    """The gate's verdict: reproducible or not, each figure with the count of answers behind it.

    `needed`: the answers each prompt must have for one answer to count as reproducible (the
    gate's requests per prompt); a prompt with fewer (the runtime died, requests failed) leaves
    the verdict undetermined, "k of n answered", never "reproducible"."""
    notes = [n for p in prompts if (n := truncation_note(p))]
    tail = ("; " + "; ".join(notes)) if notes else ""
    spread = [p for p in prompts if p.distinct_answers > 1]
    if spread:
        parts = "; ".join(f"{p.prompt_id}: {p.distinct_answers} distinct answers in {_answered(p)} "
                          f"(lengths {p.lengths_text}; {p.pattern_text or p.pattern})" for p in spread)
        return False, f"not reproducible: {parts}{tail}"
    short = [p for p in prompts if needed is not None and p.answered < needed]
    if short and not stopped:
        why = ", ".join(f"{p.prompt_id}: {p.answered} of {needed} answered"
                        + (f" ({p.stopped_reason})" if p.stopped_reason else "") for p in short)
        return None, f"undetermined: {why}{tail}"
    thin = [p for p in prompts if p.answered < 2]
    if stopped or thin or not prompts:
        why = stopped or (f"{thin[0].prompt_id}: {thin[0].answered} answer(s) in {thin[0].requests} requests"
                          + (f" ({thin[0].stopped_reason})" if thin[0].stopped_reason else "") if thin else "no prompts")
        return None, f"undetermined: {why}{tail}"
    n_min = min(p.answered for p in prompts)
    bound = unseen_share_bound(n_min)
    return True, (f"reproducible: one answer per prompt ({', '.join(f'{p.prompt_id} ×{_answered(p)}' for p in prompts)})"
                  + (f"; with {n_min} answers, an answer rarer than {bound:.0%} can still be missed ({percent(CONFIDENCE)})"
                     if bound is not None else
                     f"; {n_min} answers are too few to bound how common another answer could be") + tail)


def samples_of(gate: GateResult, prompt_id: str) -> list[Sample]:
    """Rebuild the per-request samples of one prompt from the gate's distinct answers (each with the
    logprobs of its answer's first occurrence; failed requests after the answered ones)."""
    p = next((p for p in gate.prompts if p.prompt_id == prompt_id), None)
    if p is None:
        return []
    out: list[Sample] = []
    for ans in p.answers:
        for k, i in enumerate(ans.indices):
            out.append(Sample(index=i, text=ans.text, token_ids=ans.token_ids, logprobs=ans.logprobs,
                              completion_tokens=ans.n_tokens,
                              finish_reason="length" if k < ans.truncated else None))
    for k in range(p.errors):
        out.append(Sample(index=10_000 + k, error="failed"))
    return out


def truncation_by_prompt(gate: GateResult | None) -> dict[str, tuple[int, int]]:
    """Per prompt of a gate (a control row's): (answers cut at max_tokens, the cap); empty without a gate."""
    return {p.prompt_id: (p.truncated, p.max_tokens) for p in gate.prompts} if gate is not None else {}

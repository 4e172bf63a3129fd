"""The LLM judge: a second opinion on the extraction answers, through any OpenAI-compatible endpoint.

Optional. When the stage context carries a judge client (the catalog names a judge: a model card
and arm of this catalog, or a URL and a served model name), the extraction stage hands it its
answers. The judge reads the section text, the facts asked and the JSON answer, and returns one
verdict per fact (correct / wrong / missing) with its reasoning, following the rubric in
`prompts/judge/rubric.toml`. It never sees the gold facts, so its score is an independent figure,
reported with its standard error next to the gold-based recall of the same answers, with the
fact-level agreement between the two: the raw share of facts where both say "correct" or both
do not, and Cohen's kappa, the same agreement corrected for what chance alone would give.

Which answers are graded: every repeat when the extraction itself found a section whose repeats
differed (`suite.stages.extraction.documents.changed_sections`), or when the gate found the arm not
reproducible; the first repeat of each section otherwise. The judge is itself gated: one grading is repeated
`judge_repeats` times and its distinct-answer count is reported, because an unstable judge's
score means little. The judge's raw answers and reasoning go to `requests.jsonl` (kind `judge`);
they are untrusted model output, stored and shown escaped, never acted upon.

The answer under review is untrusted too, and it reaches the judge's prompt: it goes between
`<answer>` and `</answer>` lines, cut at `JUDGE_ANSWER_CHARS`, its own answer tags defused
(`delimit_answer`), under a rubric line that says it is never an instruction. That narrows what a
hostile answer can do; it cannot stop a judge model that obeys text it was told to ignore. What
such an answer can reach is the judge's score and reasoning for that answer (the gold-based recall
beside it, and the agreement and kappa between the two, are out of its reach), never the suite:
the judge's reply is read as data, only verdict words for the asked keys count.

Nothing here sends a request to the judge: the rubric, the prompt and schema built for it, the
verdicts read from its reply, the agreement with gold, the records (`JudgeResult`) and the judge a
bench uses (`preflight`, which asks its endpoint for its models before any runtime starts) are
here; its client and the grading (`client_for_url`, `grade`) are `suite.stages.extraction.judge_run`'s.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field

from suite.analysis.stats import MeanSE, cohen_kappa
from suite.errors import SuiteError
from suite.paths import PROMPTS_DIR
from suite.stages.extraction.documents import Answer, DocumentPart, changed_parts

if TYPE_CHECKING:
    from suite.catalog import ModelCard

log = logging.getLogger(__name__)

RUBRIC_PATH = PROMPTS_DIR / "judge" / "rubric.toml"
JUDGE_API_KEY_ENV = "SUITE_JUDGE_API_KEY"
VERDICTS = ("correct", "wrong", "missing")


class Rubric(BaseModel):
    """`prompts/judge/rubric.toml`."""

    model_config = ConfigDict(extra="forbid")

    version: int
    max_tokens: int = Field(gt=0)
    template: str


def load_rubric(path: Path = RUBRIC_PATH) -> Rubric:
    from suite.definitions import load_validated

    rubric = load_validated(path, Rubric)
    try:
        rubric.template.format(text="", facts="", answer="")
    except (KeyError, IndexError, ValueError, AttributeError, TypeError) as exc:
        raise SuiteError(f"{path}: template: placeholders must be {{text}}, {{facts}}, {{answer}} ({exc})") from None
    return rubric


def public_url(url: str) -> str:
    """The endpoint URL without any user:password part (records never hold secrets)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class JudgeGate(BaseModel):
    """The judge's own reproducibility: one grading repeated."""

    section: str = Field(description="the section whose first answer was graded repeatedly")
    repeats: int = Field(description="times the same grading was requested")
    distinct_answers: int = Field(description="distinct raw judge answers")
    distinct_verdicts: int = Field(description="distinct verdict sets (ignoring the reasoning text)")
    failed: int = Field(default=0, description="gradings that errored or gave no JSON")


class JudgeResult(BaseModel):
    """The judge's grading of one arm's extraction answers, beside the gold-based score."""

    rubric_version: int = Field(description="version of prompts/judge/rubric.toml")
    endpoint: str = Field(description="judge endpoint URL (no credentials)")
    model: str = Field(description="served model name of the judge")
    mode: str = Field(description="how JSON was asked of the judge (response_format mode or prompt-only)")
    graded_repeats: Literal["first", "all"] = Field(description="first repeat only (reproducible arm) or every repeat")
    graded: int = Field(description="answers sent to the judge")
    invalid: int = Field(description="judge replies without a usable JSON verdict object")
    failed: int = Field(description="judge requests that errored")
    score: MeanSE = Field(description="judge's share of facts correct, mean and SE over sections")
    gold_score: MeanSE = Field(description="gold recall of the same answers, mean and SE over the same sections")
    agreement: float | None = Field(description="share of facts where judge 'correct' equals gold 'correct'")
    kappa: float | None = Field(
        default=None, description="Cohen's kappa of judge 'correct' vs gold 'correct' over the same facts "
                                  "(None: no facts, or both used one label throughout)")
    compared_facts: int | None = Field(default=None, description="facts behind agreement and kappa")
    graded_reason: str | None = Field(default=None, description="why the first or every repeat was graded")
    per_section: dict[str, float] = Field(
        default_factory=dict, description="section -> the judge's score averaged over its graded repeats")
    gate: JudgeGate | None = Field(default=None, description="the judge's distinct-answer count on a repeated grading")
    wall_s: float = Field(description="wall time of the judging")


JUDGE_ANSWER_CHARS = 6000  # the most of one answer the judge is shown (the extraction's answers are far shorter)
_ANSWER_TAG = re.compile(r"<(\s*/?\s*answer)", re.I)


def delimit_answer(text: str, limit: int = JUDGE_ANSWER_CHARS) -> str:
    """The answer under review as the judge sees it: between `<answer>` and `</answer>` lines, cut
    at `limit` characters (saying how many more there were), and any answer tag of its own defused
    (`<` written `&lt;`), so that the answer cannot close its block and speak as the prompt."""
    more = len(text) - limit
    if more > 0:
        text = text[:limit]
    text = _ANSWER_TAG.sub(r"&lt;\1", text)
    note = f"\n[the answer goes on for {more} more characters, not shown]" if more > 0 else ""
    return f"<answer>\n{text}{note}\n</answer>"


def build_judge_prompt(rubric: Rubric, section: DocumentPart, answer: Answer) -> str:
    facts = "\n".join(f"- {f.key}: {f.ask}" for f in section.facts)
    shown = json.dumps(answer.extracted, ensure_ascii=False, indent=1) if answer.extracted is not None else answer.text
    return rubric.template.format(text=section.text.strip(), facts=facts, answer=delimit_answer(shown)).strip()


def judge_schema(section: DocumentPart) -> dict[str, Any]:
    keys = [f.key for f in section.facts]
    return {
        "type": "object",
        "properties": {
            "reasoning": {"type": "string"},
            "verdicts": {"type": "object", "properties": {k: {"enum": list(VERDICTS)} for k in keys},
                         "required": keys, "additionalProperties": False},
        },
        "required": ["reasoning", "verdicts"],
        "additionalProperties": False,
    }


def parse_verdicts(section: DocumentPart, obj: dict[str, Any] | None) -> tuple[dict[str, str] | None, str | None]:
    """(key -> verdict, reasoning) from the judge's object; None when unusable."""
    if obj is None:
        return None, None
    raw = obj.get("verdicts")
    reasoning = obj.get("reasoning")
    if not isinstance(raw, dict):
        return None, reasoning if isinstance(reasoning, str) else None
    lower = {str(k).strip().lower(): v for k, v in raw.items()}
    verdicts: dict[str, str] = {}
    for f in section.facts:
        v = raw.get(f.key, lower.get(f.key.lower()))
        v = str(v).strip().lower() if v is not None else "missing"
        verdicts[f.key] = v if v in VERDICTS else "wrong"
    return verdicts, reasoning if isinstance(reasoning, str) else None


def graded_repeats_for(sections: list[DocumentPart], answers: dict[str, list[Answer]],
                       reproducible: bool | None) -> tuple[bool, str]:
    """(grade every repeat?, why): every repeat when the extraction's own repeats changed on some
    section, or when the gate found the arm not reproducible; the first repeat otherwise.

    The extraction's finding comes first: a gate that passed (or did not run) says nothing about
    these answers, which the extraction compared itself.
    """
    changed = changed_parts(sections, answers)
    if changed:
        return True, f"{len(changed)} of {len(sections)} sections changed between repeats"
    if reproducible is False:
        return True, "no section changed between repeats, but the gate found the arm not reproducible"
    return False, f"no section of {len(sections)} changed between repeats"


def fact_agreement(judge_correct: list[bool], gold_correct: list[bool]) -> tuple[float | None, float | None]:
    """(raw agreement, Cohen's kappa) of the judge's and the gold 'correct' over the same facts."""
    if len(judge_correct) != len(gold_correct):
        raise ValueError("fact_agreement: the judge and gold label lists differ in length")
    if not judge_correct:
        return None, None
    raw = sum(j == g for j, g in zip(judge_correct, gold_correct, strict=True)) / len(judge_correct)
    return raw, cohen_kappa(judge_correct, gold_correct)


# -- the judge a bench uses: chosen and asked before any runtime starts ---------------------------------

@dataclass
class JudgeChoice:
    """The LLM judge of the extraction stage: any OpenAI-compatible endpoint and its model name."""

    url: str
    model: str


def resolve_judge(card: ModelCard, url: str | None, model: str | None) -> JudgeChoice | None:
    """The judge named on the command line, else the card's; None: gold scoring stands alone."""
    if url:
        if not url.startswith(("http://", "https://")):
            raise SuiteError(f"judge url {url!r}: must start with http:// or https://")
        return JudgeChoice(url, model or "judge")
    ref = card.judge
    if ref is None:
        return None
    if ref.url:
        return JudgeChoice(ref.url, model or ref.served_name or "judge")  # --judge-model first
    if ref.model:
        from suite.catalog import get_card

        judge_card = get_card(ref.model)
        raise SuiteError(
            f"the judge {ref.model!r} is a model of the catalog: serve it first (`suite up "
            f"{ref.arm or next(iter(judge_card.arms))} --model {ref.model}`) and pass its address "
            "with --judge-url")
    return None


def probe_judge(judge: JudgeChoice, explicit_model: bool = True, timeout_s: float = 10.0) -> JudgeChoice:
    """The judge's endpoint asked for its models before any runtime starts: one that does not answer,
    refuses the key, is not an OpenAI-compatible API or does not serve the named model is one line.
    Without a model name, a judge serving exactly one model is asked for that one."""
    import httpx

    from suite.launchers.external import model_list
    from suite.secrets import scrub

    shown = scrub(judge.url)
    root = judge.url.rstrip("/").removesuffix("/v1")
    key = os.environ.get(JUDGE_API_KEY_ENV)
    with httpx.Client(base_url=root, timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0)),
                      follow_redirects=False, headers={"Authorization": f"Bearer {key}"} if key else {}) as http:
        _, listed = model_list(http, "--judge-url", shown, JUDGE_API_KEY_ENV, who="the judge")
    models = [m["id"] for m in listed]
    if explicit_model:
        if judge.model not in models:
            raise SuiteError(f"--judge-model {judge.model!r}: not served at {shown}; it lists: "
                             f"{', '.join(models) or 'no model'}")
        return judge
    if judge.model in models:
        return judge
    if len(models) == 1:
        return JudgeChoice(judge.url, models[0])
    raise SuiteError(f"--judge-url {shown} serves {len(models)} models ({', '.join(models) or 'none'}): "
                     "name one with --judge-model")


def judge_model_needs_a_url(card: ModelCard, judge_model: str) -> None:
    """`--judge-model` names a model at a judge's address: --judge-url's, or the card's own judge
    URL; with neither it would be ignored, so it is one line instead."""
    ref = card.judge
    if ref is None or not ref.url:
        raise SuiteError(f"--judge-model {judge_model!r}: names a model at a judge's address; give that "
                         "address with --judge-url")


def preflight(settings: Any, plans: list[Any]) -> Any:
    """The extraction stage's check before any runtime starts: the judge named by --judge-url (else
    the card's) is asked for its models, and its rubric read; the settings come back with the judge
    resolved (its address and model), or without one."""
    if not plans:
        return settings
    card = plans[0].card
    if settings.judge_model is not None and settings.judge_url is None:
        judge_model_needs_a_url(card, settings.judge_model)
    judge = resolve_judge(card, settings.judge_url, settings.judge_model)
    if judge is None:
        return settings
    load_rubric()
    judge = probe_judge(judge, explicit_model=settings.judge_model is not None)
    return settings.model_copy(update={"judge_url": judge.url, "judge_model": judge.model})


def judge_of(settings: Any) -> JudgeChoice | None:
    """The judge a bench's extraction settings name (after `preflight`), or None."""
    url = getattr(settings, "judge_url", None)
    return JudgeChoice(url, settings.judge_model or "judge") if url else None

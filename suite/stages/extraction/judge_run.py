"""The LLM judge's run half: its client for an OpenAI-compatible URL (`client_for_url`) and the
grading of one arm's extraction answers (`grade`), each grading a request to the judge. The rubric,
the prompt and schema built for it, the verdicts read from its reply, the agreement with gold, the
records (`JudgeResult`) and the judge chosen before a bench starts are `suite.stages.extraction.judge`'s,
which sends no request."""

from __future__ import annotations

import json
import logging
import os
import time
from statistics import fmean
from typing import TYPE_CHECKING

from suite.analysis.jsonextract import extract_json_object
from suite.analysis.stats import mean_se
from suite.client import ClientError, GenerationParams, OpenAIClient
from suite.errors import SuiteError
from suite.stages.extraction.chat import JsonChat
from suite.stages.extraction.documents import Answer, DocumentPart
from suite.stages.extraction.judge import (
    JUDGE_API_KEY_ENV,
    JudgeGate,
    JudgeResult,
    build_judge_prompt,
    fact_agreement,
    graded_repeats_for,
    judge_schema,
    load_rubric,
    parse_verdicts,
    public_url,
)

if TYPE_CHECKING:
    from suite.stages.base import StageContext

log = logging.getLogger(__name__)


def client_for_url(url: str, model: str, params: GenerationParams | None = None) -> OpenAIClient:
    """A judge client for any OpenAI-compatible URL (sampling: `params`); the API key, if any,
    comes from the environment."""
    if not url.startswith(("http://", "https://")):
        raise SuiteError(f"judge url {url!r}: must start with http:// or https://")
    return OpenAIClient(url.rstrip("/").removesuffix("/v1"), model, params=params,
                        api_key=os.environ.get(JUDGE_API_KEY_ENV))


def grade(ctx: StageContext, sections: list[DocumentPart], answers: dict[str, list[Answer]],
          max_tokens: int | None = None) -> JudgeResult:
    """Grade the extraction answers with ctx.judge, gate the judge, and compare with gold.

    `max_tokens` caps the rubric's own limit (tests keep answers short).
    """
    assert ctx.judge is not None
    t0 = time.monotonic()
    judge = ctx.judge
    rubric = load_rubric()
    chat = JsonChat(judge, supports_schema=True)
    limit = min(rubric.max_tokens, max_tokens) if max_tokens else rubric.max_tokens
    everything, reason = graded_repeats_for(sections, answers, ctx.reproducible)
    failed = invalid = graded = 0
    judge_by_part: dict[str, list[float]] = {}
    gold_by_part: dict[str, list[float]] = {}
    judge_labels: list[bool] = []
    gold_labels: list[bool] = []

    def ask(section: DocumentPart, answer: Answer) -> tuple[str | None, dict[str, str] | None, str | None, str | None]:
        prompt = build_judge_prompt(rubric, section, answer)
        try:
            c = chat.ask(prompt, judge_schema(section), max_tokens=limit)
        except ClientError as exc:
            return None, None, None, str(exc)
        parsed = extract_json_object(c.text)
        verdicts, reasoning = parse_verdicts(section, parsed.value)
        return c.text, verdicts, reasoning, None

    for section in sections:
        for answer in answers[section.uid] if everything else answers[section.uid][:1]:
            graded += 1
            text, verdicts, reasoning, error = ask(section, answer)
            failed += error is not None
            invalid += error is None and verdicts is None
            score = None
            if verdicts is not None:
                score = sum(v == "correct" for v in verdicts.values()) / len(section.facts)
                judge_by_part.setdefault(section.uid, []).append(score)
                gold_by_part.setdefault(section.uid, []).append(answer.score.recall)
                for fs in answer.score.facts:
                    judge_labels.append(verdicts.get(fs.key) == "correct")
                    gold_labels.append(fs.verdict == "correct")
            ctx.record_request(
                "judge", section=section.uid, repeat=answer.repeat, judge_model=judge.model,
                judge_endpoint=public_url(judge.base_url), rubric_version=rubric.version, mode=chat.mode,
                text=text, reasoning=reasoning, verdicts=verdicts, score=score, gold_recall=answer.score.recall,
                error=error,
            )

    gate = None
    from suite.stages.extraction import settings

    repeats = settings(ctx.profile).judge_repeats
    if repeats and sections:
        section = sections[0]
        answer = answers[section.uid][0]
        texts: list[str] = []
        verdict_sets: list[str] = []
        gate_failed = 0
        for i in range(repeats):
            text, verdicts, reasoning, error = ask(section, answer)
            if text is None or verdicts is None:
                gate_failed += 1
            if text is not None:
                texts.append(text)
            if verdicts is not None:
                verdict_sets.append(json.dumps(verdicts, sort_keys=True))
            ctx.record_request("judge-gate", section=section.uid, index=i, judge_model=judge.model,
                               judge_endpoint=public_url(judge.base_url), text=text, verdicts=verdicts,
                               reasoning=reasoning, error=error)
        gate = JudgeGate(section=section.uid, repeats=repeats, distinct_answers=len(set(texts)),
                         distinct_verdicts=len(set(verdict_sets)), failed=gate_failed)

    uids = [s.uid for s in sections if s.uid in judge_by_part]
    # each graded section has at least one score (judge and gold are appended together)
    per_section = {u: fmean(judge_by_part[u]) for u in uids}
    agreement, kappa = fact_agreement(judge_labels, gold_labels)
    return JudgeResult(
        rubric_version=rubric.version, endpoint=public_url(judge.base_url), model=judge.model, mode=chat.mode,
        graded_repeats="all" if everything else "first", graded=graded, invalid=invalid, failed=failed,
        score=mean_se([per_section[u] for u in uids]),
        gold_score=mean_se([fmean(gold_by_part[u]) for u in uids]),
        agreement=agreement, kappa=kappa, compared_facts=len(judge_labels), graded_reason=reason,
        per_section=per_section,
        gate=gate, wall_s=round(time.monotonic() - t0, 2),
    )

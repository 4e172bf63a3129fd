"""The extraction stage's run: the documents loaded and the sections a profile asks for chosen
(`select_parts`), every section asked R times for its facts as JSON (the request built from the
prompt's wording and a JSON schema of the facts), each answer and each fact recorded with the arm's
configuration signature, then scored and (with a judge) graded. Its records, figures and export are
`suite.stages.extraction.result`'s, its settings `suite.stages.extraction.settings`', the documents
and the request's wording `suite.stages.extraction.inputs`'. The run half of the package: its
`STAGE` names `run` here as "suite.stages.extraction.run:run", imported only when a bench runs the
stage; the reloads' run (`reloads_run`) asks its sections with `ask_part`."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from suite.analysis.jsonextract import extract_json_object
from suite.analysis.scoring import score_part
from suite.client import ClientError
from suite.stages.extraction.chat import JsonChat
from suite.stages.extraction.documents import Answer, DocumentPart
from suite.stages.extraction.inputs import (
    ANSWERS_KEY,
    PromptTemplate,
    _fact_signature,
    build_prompt,
    json_schema_for,
    load_documents,
    load_prompt,
    select_parts,
)
from suite.stages.extraction.result import ExtractionResult, summarise
from suite.stages.extraction.settings import ExtractionSettings, settings

if TYPE_CHECKING:
    from suite.stages.base import StageContext

log = logging.getLogger(__name__)


def ask_part(ctx: StageContext, chat: JsonChat, section: DocumentPart, prompt: PromptTemplate, repeat: int,
                signature: Any, reload: int | None = None) -> Answer:
    """Ask one section once, score it against gold, and record the request and every fact."""
    max_tokens = settings(ctx.profile).max_tokens
    content = build_prompt(section, prompt)
    schema = json_schema_for(section.facts)
    try:
        c = chat.ask(content, schema, max_tokens=max_tokens)
        text, error = c.text, None
    except ClientError as exc:
        text, error, c = "", str(exc), None
    parsed = extract_json_object(text)
    score = score_part(section.facts, parsed.value)
    where = {} if reload is None else {"reload": reload}
    ctx.record_request(
        "extraction", section=section.uid, repeat=repeat, mode=chat.mode, endpoint=chat.endpoint,
        seed=chat.client.params.seed,
        max_tokens=max_tokens, text=text, error=error,
        finish_reason=c.finish_reason if c else None, e2e_s=c.e2e_s if c else None,
        completion_tokens=c.completion_tokens if c else None, json_status=parsed.status,
        json_method=parsed.method, json_error=parsed.error, correct=score.correct, wrong=score.wrong,
        missing=score.missing, clean=score.clean, complete=score.complete, **where,
    )
    for fs in score.facts:
        ctx.record_request(
            "extraction-fact", section=section.uid, repeat=repeat, key=fs.key, type=fs.type,
            answer=fs.answer, gold=fs.gold, verdict=fs.verdict, exact=fs.exact, partial=fs.partial,
            note=fs.note, signature=signature, **where,
        )
    log.debug("extraction %s r%d: %d/%d correct, json %s", section.uid, repeat, score.correct,
              score.facts_total, parsed.status)
    return Answer(section=section.uid, repeat=repeat, text=text, extracted=parsed.value, json_status=parsed.status,
                  score=score, error=error)


def run(ctx: StageContext) -> ExtractionResult:
    """Ask every section R times, score against gold, and run the judge when there is one."""
    t_start = time.monotonic()
    own = ctx.own(ExtractionSettings) or settings(ctx.profile)
    sections = select_parts(own.sections)
    prompt = load_prompt()
    repeats = own.repeats
    caps = ctx.runtime.capabilities
    chat = JsonChat(ctx.client, supports_schema=bool(caps.json_schema), chat=bool(caps.chat))
    signature = _fact_signature(ctx)

    answers: dict[str, list[Answer]] = {s.uid: [] for s in sections}
    failed = 0
    for repeat in range(repeats):
        for section in sections:
            answer = ask_part(ctx, chat, section, prompt, repeat, signature)
            failed += answer.error is not None
            answers[section.uid].append(answer)
    ctx.results[ANSWERS_KEY] = answers  # for a reload in a fresh launch (the reloads stage)

    result = summarise(sections, answers, repeats)
    judge_result = None
    if ctx.judge is not None:
        from suite.stages.extraction import judge_run as judge_stage

        judge_result = judge_stage.grade(ctx, sections, answers)
    return ExtractionResult(
        prompt_version=prompt.version,
        documents={d.id: d.version for d in load_documents() if any(s.document == d.id for s in sections)},
        sections=len(sections), repeats=repeats, max_tokens=own.max_tokens, mode=chat.mode,
        endpoint=chat.endpoint,
        mode_rejections=chat.rejections, requests=len(sections) * repeats, failed_requests=failed,
        reproducible_gate=ctx.reproducible, judge=judge_result, wall_s=round(time.monotonic() - t_start, 2),
        signature_digest=ctx.signature.digest, **result,
    )

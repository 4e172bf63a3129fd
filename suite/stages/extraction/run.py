"""The extraction stage's run: the documents loaded and the sections a profile asks for chosen
(`select_parts`), every section asked R times for its facts as JSON (the request built from the
prompt's wording and a JSON schema of the facts), each answer and each fact recorded with the arm's
configuration signature, then scored and (with a judge) graded. Its records, figures and export are
`suite.stages.extraction.result`'s, its settings `suite.stages.extraction.settings`'; the package
takes `run` and the documents' loading from here for its `STAGE`, the reloads stage `ask_part`."""

from __future__ import annotations

import logging
import time
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from suite.analysis.jsonextract import extract_json_object
from suite.analysis.scoring import GoldFact, score_part
from suite.client import ClientError
from suite.errors import SuiteError
from suite.paths import DOCUMENTS_DIR, EXTRACTION_DIR
from suite.stages.extraction.documents import Answer, DocumentPart, JsonChat
from suite.stages.extraction.result import ExtractionResult, summarise
from suite.stages.extraction.settings import ExtractionSettings, settings

if TYPE_CHECKING:
    from suite.stages.base import StageContext

log = logging.getLogger(__name__)


SECTION_SETS = ("quick", "standard", "full")
SIGNATURE_KEY_FIELDS = ("model", "model_format", "model_sha256", "runtime", "runtime_version", "launcher",
                        "controls", "prompt_set_hash")


# -- documents ------------------------------------------------------------------------------------

class Document(BaseModel):
    """One extraction document file."""

    model_config = ConfigDict(extra="forbid")

    version: int
    id: str
    kind: str
    title: str
    sections: list[DocumentPart] = Field(min_length=1)


class PromptTemplate(BaseModel):
    """`prompts/extraction/prompt.toml`: the request wording and the format hint per fact type."""

    model_config = ConfigDict(extra="forbid")

    version: int
    template: str
    formats: dict[str, str]


def load_document(path: Path) -> Document:
    """Load and check one document; errors name the file and the key."""
    from suite.definitions import load_validated

    doc = load_validated(path, Document)
    seen: set[str] = set()
    for section in doc.sections:
        if section.id in seen:
            raise SuiteError(f"{path}: duplicate section id {section.id!r}")
        seen.add(section.id)
        if "full" not in section.profiles:
            raise SuiteError(f"{path}: section {section.id!r}: every section belongs to the 'full' set")
        keys = [f.key for f in section.facts]
        if len(set(keys)) != len(keys):
            raise SuiteError(f"{path}: section {section.id!r}: duplicate fact key")
        section.document, section.kind = doc.id, doc.kind
    return doc


@lru_cache(maxsize=4)
def _load_all(directory: str) -> tuple[Document, ...]:
    paths = sorted(Path(directory).glob("*.toml"))
    if not paths:
        raise SuiteError(f"{directory}: no extraction documents (*.toml)")
    return tuple(load_document(p) for p in paths)


def load_documents(directory: Path = DOCUMENTS_DIR) -> list[Document]:
    return list(_load_all(str(directory)))


def load_prompt(path: Path = EXTRACTION_DIR / "prompt.toml") -> PromptTemplate:
    from suite.definitions import load_validated

    return load_validated(path, PromptTemplate)


def select_parts(n: int, documents: list[Document] | None = None) -> list[DocumentPart]:
    """The first n sections of the smallest section set (quick, standard, full) that has n."""
    docs = documents if documents is not None else load_documents()
    every = [s for d in docs for s in d.sections]
    if n < 1:
        raise SuiteError(f"extraction_sections must be at least 1, got {n}")
    for tag in SECTION_SETS:
        tagged = [s for s in every if tag in s.profiles]
        if len(tagged) >= n:
            return tagged[:n]
    raise SuiteError(f"extraction_sections={n}, but the documents have only {len(every)} sections")


# -- requests -------------------------------------------------------------------------------------

def fact_format(fact: GoldFact, prompt: PromptTemplate) -> str:
    if fact.type == "number":
        return prompt.formats["number_with_unit" if fact.unit else "number"]
    return prompt.formats[fact.type]


def build_prompt(section: DocumentPart, prompt: PromptTemplate) -> str:
    lines = "\n".join(f"- {f.key}: {f.ask} ({fact_format(f, prompt)})" for f in section.facts)
    return prompt.template.format(facts=lines, text=section.text.strip()).strip()


def json_schema_for(facts: list[GoldFact]) -> dict[str, Any]:
    """The JSON schema of the answer: every asked key, each its type or null."""
    props: dict[str, Any] = {}
    for f in facts:
        if f.type == "boolean":
            kind = "boolean"
        elif f.type == "number" and not f.unit:
            kind = "number"
        else:
            kind = "string"
        props[f.key] = {"anyOf": [{"type": kind}, {"type": "null"}]}
    return {"type": "object", "properties": props, "required": [f.key for f in facts],
            "additionalProperties": False}


ANSWERS_KEY = "extraction.answers"  # where the stage leaves its answers for the reloads stage


def _fact_signature(ctx: StageContext) -> dict[str, Any]:
    sig = ctx.signature.model_dump(mode="json")
    return {k: sig.get(k) for k in (*SIGNATURE_KEY_FIELDS, "command", "env", "hardware", "image_digest", "suite_version")}


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
        from suite.stages.extraction import judge as judge_stage

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

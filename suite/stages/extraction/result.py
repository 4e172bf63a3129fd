"""The extraction stage's records and what is computed from them alone: the gold scores per repeat,
per fact type and per document section (`RepeatScore`, `TypeScore`, `SectionSummary`), the stage's
result (`ExtractionResult`), `summarise` that makes its figures from the scored answers, the
claims, the export's extraction_sections table and the stage's request lines (an answer, each of
its facts, the judge's grading). Nothing here sends a request; `suite.stages.extraction.run` fills
these records."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

from suite.analysis.claims import Claim, Evidence, run_caveats
from suite.analysis.levels import ALPHA, CONFIDENCE, percent
from suite.analysis.stats import MeanSE, mean, mean_se
from suite.stages.base import ColumnType
from suite.stages.extraction.documents import Answer, DocumentPart, Mode, _answered_facts, changed_parts
from suite.stages.extraction.judge import JudgeResult
from suite.stages.lines import LineBase, RequestLineBase

RESULT_VERSION = 1


class RepeatScore(BaseModel):
    """Gold scores of one repeat over all sections (the spread across repeats)."""

    repeat: int = Field(description="repeat index, 0-based")
    clean_share: float | None = Field(description="share of sections with valid JSON and no wrong fact")
    complete_share: float | None = Field(default=None, description="share of sections with no wrong and no missing fact")
    precision: float | None = Field(description="mean over sections of correct / answered")
    recall: float | None = Field(description="mean over sections of correct / gold facts")
    invalid_json: int = Field(description="sections whose answer held no JSON object")


class TypeScore(BaseModel):
    """Gold scores by fact type, over all facts and repeats."""

    facts: int = Field(description="facts of this type asked, times repeats")
    correct: int = Field(description="right after normalisation")
    correct_exact: int = Field(description="right as written")
    partial: int = Field(description="wrong but half right (title missing, unit, precision)")
    missing: int = Field(description="left null or absent")


# A document part's summary. Its name, and the fields named `section(s)` here and in `ExtractionResult`
# (`sections`, `identical_sections`, `per_section`, ...), mean a document's section (a `DocumentPart`),
# not a page's: the run record and its published schema keep them so (the docstring is the schema's).
class SectionSummary(BaseModel):
    """One section, over its repeats."""

    section: str = Field(description="document/section id")
    kind: str = Field(description="kind of document")
    facts: int = Field(description="gold facts in the section")
    identical: bool = Field(description="every repeat gave valid JSON and the extracted facts were the same in each "
                                        "(records before `comparable` existed counted all-invalid sections too)")
    distinct_answers: int = Field(description="distinct extracted-fact sets over the repeats (all invalid ones as one)")
    comparable: bool | None = Field(default=None, description="every repeat gave valid JSON (None: older record)")
    no_facts: bool = Field(default=False, description="every repeat was valid JSON that gave no fact (all null): "
                                                      "never counted as identical")
    clean_rate: float = Field(description="share of repeats that were clean")
    complete_rate: float | None = Field(default=None, description="share of repeats that were clean and complete")
    recall: float = Field(description="mean recall over repeats")
    precision: float | None = Field(description="mean precision over repeats (None if nothing answered)")
    invalid_json: int = Field(description="repeats without a JSON object")


class ExtractionResult(BaseModel):
    """Summary of the extraction stage for one arm (every fact is in requests.jsonl)."""

    version: int = Field(default=RESULT_VERSION, description="schema version of this result")
    prompt_version: int = Field(description="version of prompts/extraction/prompt.toml")
    documents: dict[str, int] = Field(description="document id -> its version, for the documents used")
    # Every field named `section(s)` here counts document parts (a document's sections, `DocumentPart`),
    # not a page's sections: the records and their published schema keep the names.
    sections: int = Field(description="sections asked")
    repeats: int = Field(description="repeats per section")
    max_tokens: int = Field(description="max_tokens per request")
    mode: Mode = Field(description="how JSON was asked for: json_schema / json_object response_format, or prompt-only")
    endpoint: Literal["chat", "completions"] = Field(
        default="chat", description="API used: chat, or completions where the runtime has no chat template")
    mode_rejections: list[str] = Field(
        default_factory=list, description="response_format modes (or the chat endpoint) the runtime rejected")
    requests: int = Field(description="requests sent")
    failed_requests: int = Field(description="requests that got an HTTP or protocol error")
    invalid_json: int = Field(description="answers with no JSON object (failed requests included)")
    identical_sections: int = Field(description="sections whose extracted facts were identical across all repeats, "
                                                "among the comparable sections (every repeat valid JSON)")
    comparable_sections: int | None = Field(
        default=None, description="sections where every repeat gave valid JSON: the base of identical_sections")
    invalid_sections: int | None = Field(
        default=None, description="sections with at least one repeat without JSON, left out of identical_sections")
    changed_sections: int | None = Field(
        default=None, description="sections whose repeats differed in any way (facts, or valid vs invalid answers)")
    facts_per_repeat: int = Field(description="gold facts over the sections asked")
    precision: MeanSE = Field(description="per-section precision (correct / answered), mean and SE over sections")
    recall: MeanSE = Field(description="per-section recall (correct / gold), mean and SE over sections")
    recall_exact: MeanSE = Field(description="recall counting only answers right as written")
    clean_share: MeanSE = Field(description="per-section share of clean repeats, mean and SE over sections")
    complete_share: MeanSE | None = Field(
        default=None, description="per-section share of clean and complete repeats (no wrong, no missing fact)")
    per_repeat: list[RepeatScore] = Field(description="the same scores per repeat: the spread across repeats")
    by_type: dict[str, TypeScore] = Field(description="fact type -> counts over all facts and repeats")
    per_section: list[SectionSummary] = Field(description="one row per section")
    reproducible_gate: bool | None = Field(default=None, description="the gate's verdict for this arm, if known")
    judge: JudgeResult | None = Field(default=None, description="the LLM judge's grading, when a judge was given")
    wall_s: float = Field(description="wall time of the stage")
    signature_digest: str = Field(description="configuration signature of the arm")


def no_facts(section: DocumentPart, extracted: dict[str, Any] | None) -> bool:
    """A valid answer that gives no asked fact (every value null, empty or absent): agreeing on
    nothing is not the same answer, so such answers are never "identical" nor "the same after
    a reload"."""
    if extracted is None:
        return False
    lower = {str(k).strip().lower(): v for k, v in extracted.items()}
    values = [extracted.get(f.key, lower.get(f.key.lower())) for f in section.facts]
    return all(v is None or (isinstance(v, (str, list, dict)) and not v) for v in values)


def summarise(sections: list[DocumentPart], answers: dict[str, list[Answer]], repeats: int) -> dict[str, Any]:
    """The gold-based figures of ExtractionResult from the answers (pure; tested on constructed answers)."""
    per_section: list[SectionSummary] = []
    by_type: dict[str, TypeScore] = {}
    for section in sections:
        got = answers[section.uid]
        distinct = {_answered_facts(section, a.extracted) for a in got}
        precisions = [a.score.precision for a in got if a.score.precision is not None]
        comparable = bool(got) and all(a.extracted is not None for a in got)
        empty = comparable and all(no_facts(section, a.extracted) for a in got)
        per_section.append(SectionSummary(
            section=section.uid, kind=section.kind, facts=len(section.facts),
            identical=comparable and len(distinct) == 1 and not empty, distinct_answers=len(distinct),
            comparable=comparable, no_facts=empty,
            clean_rate=sum(a.score.clean for a in got) / len(got) if got else 0.0,
            complete_rate=sum(a.score.complete for a in got) / len(got) if got else 0.0,
            recall=mean([a.score.recall for a in got]) or 0.0,
            precision=mean(precisions) if precisions else None,
            invalid_json=sum(a.extracted is None for a in got),
        ))
        for a in got:
            for fs in a.score.facts:
                t = by_type.setdefault(fs.type, TypeScore(facts=0, correct=0, correct_exact=0, partial=0, missing=0))
                t.facts += 1
                t.correct += fs.verdict == "correct"
                t.correct_exact += fs.exact
                t.partial += fs.partial
                t.missing += fs.verdict == "missing"
    per_repeat = []
    for r in range(repeats):
        scores = [answers[s.uid][r].score for s in sections]
        precs = [sc.precision for sc in scores if sc.precision is not None]
        per_repeat.append(RepeatScore(
            repeat=r, clean_share=mean([float(sc.clean) for sc in scores]),
            complete_share=mean([float(sc.complete) for sc in scores]),
            precision=mean(precs) if precs else None, recall=mean([sc.recall for sc in scores]),
            invalid_json=sum(answers[s.uid][r].extracted is None for s in sections),
        ))
    return {
        "invalid_json": sum(row.invalid_json for row in per_section),
        "identical_sections": sum(row.identical for row in per_section),
        "comparable_sections": sum(bool(row.comparable) for row in per_section),
        "invalid_sections": sum(not row.comparable for row in per_section),
        "changed_sections": len(changed_parts(sections, answers)),
        "facts_per_repeat": sum(len(s.facts) for s in sections),
        "precision": mean_se([row.precision for row in per_section if row.precision is not None]),
        "recall": mean_se([row.recall for row in per_section]),
        "recall_exact": mean_se([mean([a.score.correct_exact / a.score.facts_total for a in answers[s.uid]]) or 0.0
                                 for s in sections]),
        "clean_share": mean_se([row.clean_rate for row in per_section]),
        "complete_share": mean_se([row.complete_rate for row in per_section if row.complete_rate is not None]),
        "per_repeat": per_repeat,
        "by_type": by_type,
        "per_section": per_section,
    }


def export_rows(result: ExtractionResult) -> list[dict[str, Any]]:
    """`suite export`'s extraction_sections table: one row per document section."""
    return [sec.model_dump() for sec in result.per_section]


COLUMNS: dict[str, ColumnType] = {
    "section": "str", "kind": "str", "facts": "int", "identical": "bool", "distinct_answers": "int",
    "comparable": "bool", "no_facts": "bool", "clean_rate": "float", "complete_rate": "float", "recall": "float",
    "precision": "float", "invalid_json": "int"}


# -- its request lines ------------------------------------------------------------------------------

class ExtractionLine(RequestLineBase):
    kind: Literal["extraction"]
    section: str
    repeat: int
    reload: int | None = None  # the reload it was asked in (None: the arm's own launch)


class FactLine(LineBase):
    """One gold fact of an extraction answer, scored."""

    kind: Literal["extraction-fact"]
    section: str
    repeat: int
    key: str
    verdict: str


class JudgeLine(RequestLineBase):
    kind: Literal["judge", "judge-gate"]
    section: str | None = None
    judge_model: str | None = None


# The extraction claims' closed vocabulary (`Stage.verdicts`): whether the document parts gave the
# same facts in every repeat, and the share measured (the figures are in counts and phrase).
ExtractionVerdict = Literal["identical in every part", "differ in some parts", "nothing comparable",
                            "share clean and complete", "share clean"]
VERDICTS: dict[str, tuple[str, ...]] = {"extraction": get_args(ExtractionVerdict)}


def claims(result: ExtractionResult, summary: Any) -> list[Claim]:
    """Sections whose facts were identical across repeats (of those with valid JSON in every repeat),
    with the exact 95 % interval of that share; the share clean and complete with its SE over sections."""
    from suite.analysis.stats import clopper_pearson

    arm, run_id = getattr(summary, "arm", ""), getattr(summary, "run_id", "")
    extra = run_caveats(summary, "extraction")
    base = result.comparable_sections if result.comparable_sections is not None else result.sections
    same = result.identical_sections
    interval = clopper_pearson(same, base) if base else None
    out = [Claim(stage="extraction", kind="extraction", arm=arm, run_id=run_id, configuration="identical facts",
                 verdict=("nothing comparable" if not base else "identical in every part" if same == base
                          else "differ in some parts"), good=(same == base) if base else None,
                 counts={"identical": same, "comparable": base, "sections": result.sections,
                         "repeats": result.repeats, "failed_requests": result.failed_requests},
                 evidence=Evidence(test="exact (Clopper-Pearson) interval of the share", n=base, unit="document parts",
                                   interval=interval, level=CONFIDENCE if interval else None),
                 caveats=([f"{result.failed_requests} of {result.requests} requests failed"]
                          if result.failed_requests else []) + extra,
                 phrase=f"{same} of {base} document parts gave the same facts in every repeat",
                 text=f"{same} of {base} document parts identical across {result.repeats} repeats (of those with valid "
                      f"JSON in every repeat; {result.sections} document parts asked)")]
    share = result.complete_share or result.clean_share
    if share.mean is not None:
        what: Literal["clean and complete", "clean"] = "clean and complete" if result.complete_share is not None else "clean"
        se = f" ± {share.se * 100:.1f}" if share.se else ""
        phrase = f"{share.mean * 100:.1f}{se} % {what} (n = {share.n})"
        if share.se == 0 and share.n and share.mean in (0.0, 1.0):
            # every section alike: no spread to estimate; the one-sided exact bound of 0 (or n) of n instead
            edge = 1.0 - ALPHA ** (1.0 / share.n)
            phrase = (f"{share.mean * 100:.0f} % {what} in every one of {share.n} document parts: no spread to estimate; "
                      + (f"up to {edge * 100:.0f} %" if share.mean == 0.0 else f"down to {100 - edge * 100:.0f} %")
                      + f" is not ruled out ({percent(CONFIDENCE, space=True)})")
        out.append(Claim(stage="extraction", kind="extraction", arm=arm, run_id=run_id, configuration=what,
                         verdict=f"share {what}", counts={"sections": share.n},
                         evidence=Evidence(test="mean and standard error over document parts", n=share.n, unit="document parts"),
                         caveats=list(extra), phrase=phrase,
                         text=f"{share.mean * 100:.1f}{se} % of document parts {what} (mean over {share.n} parts)"))
    return out

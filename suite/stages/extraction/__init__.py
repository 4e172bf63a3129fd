"""The extraction stage: facts extracted from documents as JSON, repeated, scored against gold.

The documents live in `prompts/extraction/documents/*.toml` (original texts, split into sections,
each section with typed gold facts; see `suite.analysis.scoring.GoldFact`), the request wording in
`prompts/extraction/prompt.toml`. A profile asks for N sections: the sections tagged with the
smallest of the `quick` (3), `standard` (24) and `full` (48) sets that holds N, in file order.

Every section is asked R times (its setting `repeats`, `ExtractionSettings`) with the card's seed and sampling. The
answer is requested as JSON against a schema: through `response_format` (OpenAI `json_schema`,
then llama-cpp-python's `json_object` + schema) where the runtime supports it, otherwise by the
prompt alone; the mode used is reported. Model output is untrusted: it is parsed by
`suite.analysis.jsonextract` (invalid JSON is counted, never a crash) and only compared with gold.

Per arm: sections whose extracted facts are identical across the R repeats, counted only over
the sections where every repeat gave valid JSON (sections with an invalid repeat are counted
apart: three invalid answers are not "identical"); precision, recall, the share of "clean"
answers (valid JSON, no wrong fact: an all-null answer is clean) and the share of "clean and
complete" answers (no wrong and no missing fact, the honest headline), as mean and standard
error over sections; the spread over repeats; figures by fact type. Every fact goes to `requests.jsonl`
(kind `extraction-fact`) with the arm's full configuration signature, so any fact can be traced
to the exact configuration that produced it. An optional LLM judge (`suite.stages.extraction.judge`) grades
the answers too, when the context has one.

The package in two halves. The record half, imported here: `documents` (a document's parts and the
answers to them), `inputs` (the documents loaded, the sections a profile asks for, the request's
wording), `result` (the records and figures), `judge` (the judge's rubric, records and choice),
`settings` and `view`, and the reloads stage's record, `reloads`. The run half, imported only when
a bench runs the stage: `run` (named by `STAGE` as "suite.stages.extraction.run:run"), `chat` (the
JSON requests), `judge_run` (the judge's grading) and `reloads_run` (the reloads' launches).
"""

from __future__ import annotations

from suite.stages.base import ExportTable, SectionTemplate, Stage
from suite.stages.extraction.documents import Answer, DocumentPart, changed_parts
from suite.stages.extraction.inputs import (
    ANSWERS_KEY,
    SECTION_SETS,
    Document,
    PromptTemplate,
    _fact_signature,
    build_prompt,
    json_schema_for,
    load_document,
    load_documents,
    load_prompt,
    select_parts,
)
from suite.stages.extraction.judge import preflight as judge_preflight
from suite.stages.extraction.result import (
    COLUMNS,
    VERDICTS,
    ExtractionLine,
    ExtractionResult,
    FactLine,
    JudgeLine,
    RepeatScore,
    SectionSummary,
    TypeScore,
    claims,
    export_rows,
    no_facts,
    summarise,
)
from suite.stages.extraction.settings import OPTIONS, PROFILE_KEYS, PROFILES, ExtractionSettings, settings

# The names other code imports from the package (each defined in the module that imports it here).
# The run half (`run`, `ask_part`, `JsonChat`, the judge's `grade`) is `suite.stages.extraction.run`'s,
# `chat`'s and `judge_run`'s, imported from there.
__all__ = ["ANSWERS_KEY", "COLUMNS", "SECTION_SETS", "STAGE", "Answer", "Document", "DocumentPart", "ExtractionLine", "ExtractionResult", "ExtractionSettings",
           "FactLine", "JudgeLine", "PromptTemplate", "RepeatScore", "SectionSummary", "TypeScore", "_fact_signature", "build_prompt",
           "changed_parts", "claims", "export_rows", "json_schema_for", "load_document", "load_documents", "load_prompt", "no_facts", "select_parts",
           "settings", "summarise"]

STAGE = Stage(name="extraction", result=ExtractionResult, run="suite.stages.extraction.run:run", lines=(ExtractionLine, FactLine, JudgeLine,),
              fresh_runtimes=False, in_bench=True,
              summary="facts extracted as JSON, repeated, scored against gold (and a judge)",
              inputs=lambda p: (select_parts(settings(p).sections), load_prompt()),
              planned=lambda p: len(select_parts(settings(p).sections)) * settings(p).repeats,
              settings=ExtractionSettings, options=OPTIONS, preflight=judge_preflight, profiles=PROFILES, profile_keys=PROFILE_KEYS,
              tables=(ExportTable("extraction_sections", export_rows, COLUMNS),),
              # its answers, each answer's facts and the judge's grading (the reloads' answers are extraction lines too)
              exported_requests=("extraction", "extraction-fact", "judge"),
              page_title="extraction", claims=claims, verdicts=VERDICTS,
              section=SectionTemplate("section.html", "suite.stages.extraction.view:page", slot="measures", order=1))

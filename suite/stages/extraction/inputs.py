"""The extraction's inputs, none of it sending a request: the documents (`prompts/extraction/documents/*.toml`,
`Document`, loaded by `load_documents`), the sections a profile asks for (`select_parts`), the
request's wording (`PromptTemplate`, `load_prompt`), the prompt and the JSON schema built from them
(`build_prompt`, `json_schema_for`), and what each fact line carries of the arm's configuration
signature (`_fact_signature`). `suite.stages.extraction.run` asks the sections; the package's
`STAGE` and the reloads stage read these to say what a bench will ask."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from suite.analysis.scoring import GoldFact
from suite.errors import SuiteError
from suite.paths import DOCUMENTS_DIR, EXTRACTION_DIR
from suite.stages.extraction.documents import DocumentPart

if TYPE_CHECKING:
    from suite.stages.base import StageContext


SECTION_SETS = ("quick", "standard", "full")
SIGNATURE_KEY_FIELDS = ("model", "model_format", "model_sha256", "runtime", "runtime_version", "launcher",
                        "controls", "prompt_set_hash")


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

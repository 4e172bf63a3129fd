"""Claims: every verdict the suite prints, as one typed object.

A claim says what is claimed (`verdict`, one word or short phrase), about which arm, prompt and
configuration, the counts it rests on, the test or interval behind it with its n (`Evidence`),
the family of tests it was corrected with (`Family`: the prompts of one verdict, the controls of
one matrix, the comparisons of one page) and the correction applied, and its caveats (answers cut
at the cap, failed requests, random weights, a busy machine, too few launches). Sentences, badges,
tables, `--json` and the export are renderings of claims; no rendering is ever stored as the source
of a verdict.

Claims are never written into a run record: each stage computes its own (`Stage.claims`) from the
answers and launch outcomes its result keeps, whenever a page, an export or `results --json` is
made (suite.claims), so an improved statistic reaches every record, old ones included.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from suite.analysis.levels import ALPHA

# "package": a claim of a stage from a package of its own (suite.stages: entry points)
ClaimKind = Literal["gate", "within-launches", "across-launches", "control", "elimination", "batch", "sessions",
                    "paired", "extraction", "compare", "package"]
Correction = Literal["none", "Holm", "Bonferroni", "intersection-union", "closed testing (Fisher)"]


class Family(BaseModel):
    """The tests a claim was corrected with: what they are, how many, how, and at what level."""

    name: str = Field(description="what the family is: 'prompts of the across-launch verdict', 'controls of the matrix'")
    size: int = Field(description="tests in the family")
    correction: Correction = Field(description="how the family's error rate is held at `alpha`")
    alpha: float = Field(default=ALPHA, description="the family's level")

    @property
    def text(self) -> str:
        """'of 6 controls tested, Holm' (nothing for a family of one)."""
        if self.size <= 1 or self.correction == "none":
            return ""
        return f"of {self.size} {self.name} tested, {self.correction}"


class Evidence(BaseModel):
    """The test or interval a claim rests on, with its n."""

    test: str | None = Field(default=None, description="the test or interval's name")
    n: int | None = Field(default=None, description="units behind it (requests, launches, sections)")
    unit: str | None = Field(default=None, description="what n counts")
    p: float | None = Field(default=None, description="the test's own p-value")
    p_adjusted: float | None = Field(default=None, description="the p-value corrected for the family")
    parts: dict[str, float] = Field(default_factory=dict, description=(
        "the p of each test the claim's sentence prints beside its own (per prompt, per control), by what it tested"))
    interval: tuple[float, float] | None = Field(default=None, description="an interval, where one is printed")
    level: float | None = Field(default=None, description="the interval's coverage")
    bound: float | None = Field(default=None, description="what an all-alike result bounds (a share)")


class Claim(BaseModel):
    """One verdict: what, about what, on what evidence, with which correction and caveats."""

    stage: str = Field(description="the stage whose result it is computed from")
    kind: ClaimKind
    arm: str
    run_id: str = ""
    prompt: str | None = None
    configuration: str | None = None  # a control row, a cache mode, a batch mode
    verdict: str = Field(description="the claim itself, in a word or a short phrase")
    # Whether the claim is good news for reproducibility (green), bad (red), or neither (grey).
    good: bool | None = None
    counts: dict[str, int] = Field(default_factory=dict)
    evidence: Evidence = Field(default_factory=Evidence)
    family: Family | None = None
    caveats: list[str] = Field(default_factory=list)
    # Costs of a configuration against the default (a control that restores one answer): the
    # ratio of its tokens/s and of its J/token to the default row's.
    cost: dict[str, float] = Field(default_factory=dict)
    # What the configuration changes, in a user's words, where it is one part of the runtime (a
    # kernel-part control: "the MoE layers' kernels MARLIN (WNA16), with it Triton WNA16 fused MoE")
    subject: str | None = None
    phrase: str = Field(default="", description="the claim in a short phrase (badges, the first screen)")
    text: str = Field(default="", description="the claim in its full sentence")


def caveat_cut(truncated: int, answered: int) -> list[str]:
    """'12 of 20 answers cut at the cap' where any answer stopped at max_tokens."""
    if not truncated:
        return []
    every = "every answer" if truncated == answered else f"{truncated} of {answered} answers"
    return [f"{every} cut at max_tokens: answers may differ past the cap"]


def caveat_failed(errors: int, requests: int) -> list[str]:
    return [f"{errors} of {requests} requests failed"] if errors else []


def run_caveats(summary: object, stage: str) -> list[str]:
    """Caveats every claim of a run's stage carries: random weights, a busy machine during the stage."""
    out: list[str] = []
    sig = getattr(summary, "signature", None)
    if sig is not None and getattr(sig, "model_random_weights", None):
        out.append("random weights: near-ties between tokens are common, unlike a trained model")
    contention = (getattr(summary, "contention", None) or {}).get(stage)
    if contention is not None and getattr(contention, "busy", False):
        out.append(f"busy machine: other processes used {contention.others_share:.0%} of the CPUs")
    return out


class Recomputed(BaseModel):
    """A verdict text a run printed when it ended that today's statistics say otherwise: the page
    shows the claim computed now, with this beside it."""

    stage: str
    field: str
    then: str = Field(description="the text as the run printed it when it ended")
    now: str = Field(description="the text computed from the same answers today")
    written_by: str = Field(description="the suite version (and commit, where recorded) that wrote the record")
    kept: bool = Field(default=False, description="the record lacks what the claim needs: its stored text is shown, "
                                                  "marked as such")

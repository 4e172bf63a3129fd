"""The control matrix's records: one control row's test against the default row on one prompt
(`RowTest`), one configuration of the matrix and what the gate gave on it (`MatrixRow`), the LoRA
rows' outcome (`LoraOutcome`) and the stage's result (`ControlMatrixResult`, what the bench writes to
`stages/controls.json` and under `controls` in `summary.json`), with the elimination's level they
default to (`ELIMINATION_ALPHA`)."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

from suite.analysis.levels import ALPHA
from suite.gpu import Energy
from suite.stages.controls.series import InLaunchSeries
from suite.stages.gate_models import GateResult

# The level of the elimination's test (one-sided Fisher's exact test, per control and prompt).
ELIMINATION_ALPHA = ALPHA


# The closed vocabularies of the stage's claims: a control row's verdict, and the matrix's (the
# elimination's; the restoring controls are named in its phrase, not in its verdict).
ControlVerdict = Literal["restores one answer", "restores one answer inside each launch",
                         "passes alone, not over the matrix", "still varies", "no effect of the stated size",
                         "not shown", "every request failed", "refused", "failed", "skipped", "unchanged"]
EliminationVerdict = Literal["restores one answer", "restores one answer inside each launch",
                             "nothing tested restores one answer", "no default row", "nothing to eliminate"]
# Per claim kind, the verdicts it may print (`Stage.verdicts`).
VERDICTS: dict[str, tuple[str, ...]] = {"control": get_args(ControlVerdict), "elimination": get_args(EliminationVerdict)}


class LaunchCount(BaseModel):
    """One launch of a row on one prompt: its answered requests, how many gave its modal answer,
    and that answer's key (a digest of its token ids, or of its text where ids are missing)."""

    answered: int
    modal_count: int
    modal: str


class RowTest(BaseModel):
    """One control row against the default row on one prompt that varied."""

    prompt_id: str
    n: int  # the row's answered requests
    others: int  # its answers other than its modal one
    default_n: int
    default_others: int
    p_value: float | None = None  # one-sided Fisher's exact test: fewer other answers than default
    credited: bool = False  # one answer, and p <= alpha
    needed: int | None = None  # requests (or launches) per row that could decide, where this row could not
    # What the test counts: answers, or launches where the default row's odd answer is a cold-start
    # transient (its first request only: once per launch, however many requests follow)
    # or pairs of requests with and without a per-request control inside one launch (`inlaunch`)
    unit: Literal["request", "launch", "pair"] = "request"
    stopped_early: bool = False  # the row stopped at its second answer
    text: str = ""
    # Over a row of several launches, the requests are counted inside their own launch (the answers
    # other than that launch's modal one): a control that leaves one answer inside each launch while
    # the launches answer differently removes the variation one request at a time, and what is left
    # is chosen at start-up. How many different answers the launches' modal answers were (1: alike).
    launch_answers: int = 1


class MatrixRow(BaseModel):
    """One configuration of the control matrix and what the gate gave on it."""

    configuration: str  # default | a control name | lora:base | lora:adapter
    controls: list[str] = Field(default_factory=list)
    description: str = ""
    # unchanged: a kernel-part control whose start-up named the same kernels for its part as the
    # default's: the switch changed nothing, so the row is neither credited nor ruled out
    status: Literal["ok", "refused", "failed", "skipped", "unchanged"]
    reason: str | None = None  # refusal / failure / skip reason (the log's error line)
    concurrency: int = 1
    startup_s: float | None = None
    command: list[str] | None = None
    # Exactly what the row's runtime ran with: every control applied (the arm's own and the
    # row's; never the main launch's determinism mode unless it is the row), their env and args.
    ran_controls: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    args: list[str] = Field(default_factory=list)
    request_extra: dict[str, Any] = Field(default_factory=dict)
    tokens_per_s: float | None = None  # generated tokens per second of HTTP time, one request at a time
    # The GPUs' energy over the row's gate (not its start-up) and its J per output token; None
    # where NVML has no energy counter (a CPU machine).
    energy: Energy | None = None
    distinct: dict[str, int] = Field(default_factory=dict)  # prompt id -> distinct answers
    answered: dict[str, int] = Field(default_factory=dict)
    lengths: dict[str, str] = Field(default_factory=dict)  # prompt id -> "973 ×9, 993 ×11"
    cold_is_modal: dict[str, bool | None] = Field(default_factory=dict)
    modal_count: dict[str, int] = Field(default_factory=dict)  # prompt id -> answers equal to the modal one
    sent: dict[str, int] = Field(default_factory=dict)  # prompt id -> requests sent (fewer: stopped early)
    tests: list[RowTest] = Field(default_factory=list)  # against the default row, per prompt that varied
    # The control's own test over the prompts that varied: it must restore each, so its p is the
    # largest of theirs (an intersection-union test); `p_adjusted` is that p corrected for the
    # controls of the matrix tested together (Holm): credited where it is at most the level.
    p_value: float | None = None
    p_adjusted: float | None = None
    reproducible: bool | None = None
    gate: GateResult | None = None  # the (first) launch's gate
    # The kernels the row's own launch ran, read from its own start-up log (linear, moe, attention),
    # and where the switch comes from (the control's `source`).
    kernel_path: dict[str, str] | None = None
    source: str = ""
    part: str | None = None  # the kernel part the control changes (its `kernel`), where it is one
    # A launch row that gave one answer is launched again: a credit rests on two launches with the
    # control (an autotuner picks kernels by measured speed, so one launch's choice can be lucky).
    # The further launches' gates, in order; the row's counts pool every launch.
    more_gates: list[GateResult] = Field(default_factory=list)
    # Where the gate's every varied prompt varied only as a cold-start transient, each row is
    # TRANSIENT_LAUNCHES launches of a short gate (the cold request and those after it): per prompt,
    # per launch, whether its first answer alone differed (True), it gave one answer (False), or the
    # requests after the first differed among themselves (None).
    launches: int = 1
    cold_odd: dict[str, list[bool | None]] = Field(default_factory=dict)
    # A control with a per-request form, tried inside one launch (`inlaunch`): per prompt, its pairs
    # of requests with and without it; tokens/s of the requests without it, in the same launch.
    in_launch: dict[str, InLaunchSeries] = Field(default_factory=dict)
    paired_tokens_per_s: float | None = None
    why: str = ""  # why the row used its unit (the per-request form it stands for)
    # Per prompt, each launch's answered requests, its modal answer's count and that answer's key,
    # as the request lines give them (split where a launch starts again at request 0); empty: the
    # counts come from the row's gates (`gate`, `more_gates`).
    per_launch: dict[str, list[LaunchCount]] = Field(default_factory=dict)

    @property
    def starts_differ(self) -> bool:
        """Whether the row's launches gave different answers on a prompt it was tested on, each
        launch giving one: what is left after the control is chosen at start-up."""
        return any(t.launch_answers > 1 for t in self.tests)

    @property
    def unit(self) -> str:
        """The row's unit: pairs inside one launch, launches, or requests of its own launch."""
        return "pair" if self.in_launch else "launch" if self.cold_odd else "request"


class LoraOutcome(BaseModel):
    offered: bool
    select: str | None = None
    adapter: str | None = None
    same_process: bool | None = None  # base and adapter served by one process
    status: Literal["ok", "refused", "failed", "skipped", "not-offered"] = "not-offered"
    reason: str | None = None
    adapter_changes_output: bool | None = None  # the adapter's modal answers differ from the base's


class ControlMatrixResult(BaseModel):
    runtime: str
    arm: str
    requested: list[str]
    n_requests: int
    prompts: list[str]
    rows: list[MatrixRow]
    lora: LoraOutcome | None = None
    automatic: bool = False  # run by the bench because the gate found more than one answer
    # The process of elimination: the prompts that gave more than one answer at default, and the
    # controls under which every one of them gave a single answer.
    spread_prompts: list[str] = Field(default_factory=list)
    restoring: list[str] = Field(default_factory=list)
    elimination: str = ""
    alpha: float = ELIMINATION_ALPHA
    family: int = 0  # controls tested together (the matrix's family); Holm corrects their tests
    correction: str = "Holm"
    launches_per_row: int = 1  # > 1: the rows were launches of a short gate (a cold-start transient)
    # Set where the run stopped before the stage's end and its finished rows were rebuilt from the
    # request lines it kept (`rebuild`): what was rebuilt, what was cut and what the lines do not keep.
    interrupted: str | None = None

    @property
    def restores_word(self) -> Literal["restores one answer", "restores one answer inside each launch"]:
        """What the restoring controls do, in the words of their claims: "restores one answer", or
        "... inside each launch" where the launches of a restoring row answered differently."""
        inside = any(r.starts_differ for r in self.rows if r.configuration in self.restoring)
        return "restores one answer inside each launch" if inside else "restores one answer"

"""The controls stage: the gate once per determinism control, each on a fresh runtime.

`suite gate --controls all` (or a comma-separated list of control names) runs it after the gate.
For every requested configuration (`default`, then each control set the runtime's `runtime.toml`
declares: prompt cache on or off, prefix caching off, eager mode, concurrency 4, ...) the runtime
is started fresh with that control (`ctx.launch`), the gate runs on it, and the runtime stops.
A runtime that refuses a control at start-up is a row of the table (`refused`, with the error
line), not a failure of the stage.

LoRA: where the runtime serves adapters (`capabilities.lora`) and `lora` is requested (or
`all`), one process is started with the suite's test adapter (made by `suite/recipes/make_lora.py`
when missing), and the gate runs twice in it, base and adapter, as two rows. How a request
selects one or the other is the runtime's `capabilities.lora_select`: the model field (vLLM), a
per-request `lora` scale list (llama-server), or not at all (the adapter applies to the whole
process: llama-cpp-python), which the result says.

The process of elimination (`eliminate`) is a test, not a glance, corrected over the matrix's controls
(Holm): a control is credited with
bringing a prompt back to one answer only where its row gave one answer and differs from the
default row of the same matrix by a one-sided Fisher's exact test (other-than-modal answers vs
modal ones, control row against default row) at 5 %; every row shows its n, and a row that cannot
decide says how many requests per row would. A control row stops a prompt as soon as it shows a
second answer (it can no longer be credited). Run automatically by the bench after a gate that
varied, the matrix sends only the prompts that varied.

`format_controls_table` renders the result as the table the CLI prints.
"""

from __future__ import annotations

import logging
import math
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field
from rich.table import Table
from rich.text import Text

from suite.analysis.claims import Claim, Evidence, Family, run_caveats
from suite.analysis.repro import Sample, analyse, group_answers, unseen_share_bound
from suite.analysis.sequential import EFFECT, MAX_PAIRS
from suite.analysis.stats import fisher_fewer_others, holm, requests_needed
from suite.definitions import InLaunch
from suite.errors import EnvironmentUnavailable, RuntimeStartError, SuiteError
from suite.gpu import Energy, EnergyMeter
from suite.launchers.base import LoraAdapter
from suite.stages.base import ColumnType, ExportTable, SectionTemplate, Stage, StageContext, StageOption, length_lists
from suite.stages.controls.inlaunch import InLaunchSeries, run_controls
from suite.stages.lines import AnswerLine
from suite.stages.repeat import (
    GatePromptResult,
    GateResult,
    concurrency_of,
    death_reason_of,
    logprobs_for,
    run_gate,
    select_prompts,
    truncation_by_prompt,
    verdict_of,
)

if TYPE_CHECKING:
    from suite.catalog import ModelCard
    from suite.profiles import Profile

log = logging.getLogger(__name__)


LORA = "lora"
ADAPTER_NAME = "suite-test-lora"
# A control row stops a prompt's series once it has shown this many distinct answers.
CONTROL_STOP_AFTER_DISTINCT = 2
# The level of the elimination's test (one-sided Fisher's exact test, per control and prompt).
ELIMINATION_ALPHA = 0.05
# Where the gate's variance is a cold-start transient (once per launch), each row is this many
# launches of a short gate: the transient in 3 of 3 default launches against 0 of 3 under a control
# is p = 1/C(6, 3) = 0.05, the fewest that can credit a control. Three requests per prompt per
# launch: the cold one and two after it, which must agree with each other.
TRANSIENT_LAUNCHES = 3
TRANSIENT_REQUESTS = 3


def launches_for(controls: int, alpha: float = ELIMINATION_ALPHA) -> int:
    """Launches per row a transient's matrix of `controls` controls needs for its corrected test to
    be able to credit one: the transient in L of L default launches against 0 of L under a control
    is p = 1 / C(2L, L), and Holm over the controls asks the smallest p to be at most alpha / controls
    (3 launches for one control, 4 for two to three, 5 for four to twelve)."""
    level = alpha / max(1, controls)
    launches = TRANSIENT_LAUNCHES
    while 1.0 / math.comb(2 * launches, launches) > level:
        launches += 1
    return launches


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


class ControlRow(BaseModel):
    """One configuration of the control matrix and what the gate gave on it."""

    configuration: str  # default | a control name | lora:base | lora:adapter
    controls: list[str] = Field(default_factory=list)
    description: str = ""
    status: Literal["ok", "refused", "failed", "skipped"]
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


class ControlsResult(BaseModel):
    runtime: str
    arm: str
    requested: list[str]
    n_requests: int
    prompts: list[str]
    rows: list[ControlRow]
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


class ControlsSettings(BaseModel):
    """The stage's settings (`--auto-controls/--no-auto-controls`)."""

    model_config = ConfigDict(extra="forbid")

    # When the gate finds more than one answer, run the arm's control matrix one control at a time
    # (the process of elimination) after the other stages.
    auto: bool = True
    # Controls that can be applied per request are tried inside one launch, in pairs with and
    # without, stopped by an exact sequential test (False: each in launches of its own, as before).
    in_launch: bool = True
    # The level of those rows before the matrix's correction: requests are cheap, so they ask for
    # more than the launch rows' 5 %.
    in_launch_alpha: float = Field(default=0.01, gt=0.0, lt=0.5)
    max_pairs: int = Field(default=MAX_PAIRS, ge=4, le=200)  # pairs a prompt may take before it stops undecided
    effect: float = Field(default=EFFECT, gt=0.0, le=1.0)  # the share of pairs an undecided row rules out
    # The rows asked for with --controls ('all' or control names; None: none asked): checked against
    # every arm's runtime by `preflight`; what the run did is in its invocation, not its settings.
    names: list[str] | None = Field(default=None, exclude=True)


def preflight(own: BaseModel, plans: list[Any]) -> BaseModel:
    """`--controls` names checked against every arm's runtime before anything starts: an unknown
    one is one line naming the option, the runtime and the controls it has."""
    for name in getattr(own, "names", None) or []:
        if name == "all":
            continue
        for plan in plans:
            runtime = plan.runtime
            try:
                if name == LORA:
                    if not runtime.capabilities.lora:
                        raise SuiteError(f"runtime {runtime.name!r} does not serve LoRA adapters")
                else:
                    runtime.control(name)
            except SuiteError as exc:
                raise SuiteError(f"--controls {name}: {exc} (arm {plan.arm_name})") from None
    return own


def settings(profile: Profile) -> ControlsSettings:
    """This stage's settings for a profile (its values, then the run's own)."""
    return cast(ControlsSettings, STAGE.settings_for(profile))


# -- configurations -------------------------------------------------------------------------------

def resolve_requested(ctx: StageContext, requested: list[str] | None) -> list[str]:
    """`all` -> default + every control that applies to the arm's kernels (+ lora where offered);
    else the names, checked."""
    names = list(requested or ["all"])
    runtime = ctx.runtime
    if "all" in names:
        path = getattr(getattr(ctx, "signature", None), "kernel_path", None)
        out = ["default", *(n for n, c in runtime.controls.items() if c.applies_to(path))]
        if runtime.capabilities.lora:
            out.append(LORA)
        return out
    out = []
    for name in names:
        if name != LORA:
            runtime.control(name)  # raises with the list of known controls
        elif not runtime.capabilities.lora:
            raise SuiteError(f"runtime {runtime.name!r} does not serve LoRA adapters (capabilities.lora = false)")
        if name not in out:
            out.append(name)
    return out


def _ran_with(row: ControlRow, running: Any) -> None:
    """Copy what the launch actually ran with onto the row."""
    row.command = list(running.command)
    row.ran_controls = list(getattr(running, "launch_controls", None) or [])
    row.env = dict(getattr(running, "launch_env", None) or {})
    row.args = list(getattr(running, "launch_args", None) or [])


def gate_tokens(gate: GateResult | None) -> int:
    """Output tokens of every answer a gate counted (each distinct answer's length times its count)."""
    return sum((a.n_tokens or 0) * a.count for p in gate.prompts for a in p.answers) if gate else 0


def row_from_gate(row: ControlRow, gate: GateResult) -> ControlRow:
    row.gate = gate
    row.reproducible = gate.reproducible
    row.request_extra = dict(gate.request_extra)
    tokens = gate_tokens(gate)
    row.tokens_per_s = round(tokens / gate.http_s, 3) if gate.http_s > 0 and tokens else None
    for p in gate.prompts:
        row.distinct[p.prompt_id] = p.distinct_answers
        row.answered[p.prompt_id] = p.answered
        row.lengths[p.prompt_id] = p.lengths_text
        row.cold_is_modal[p.prompt_id] = p.cold_warm.cold_is_modal if p.cold_warm else None
        row.modal_count[p.prompt_id] = p.answers[0].count if p.answers else 0
        row.sent[p.prompt_id] = p.requests
    if gate.stopped_reason:
        row.status, row.reason = "failed", gate.stopped_reason
    return row


def _with_energy(row: ControlRow, meter: EnergyMeter) -> ControlRow:
    """The row's energy over its gate, per output token of the gate's answers."""
    tokens = gate_tokens(row.gate)
    row.energy = meter.result(tokens or None)
    return row


def _gate_on(ctx: StageContext, running: Any, client: Any, label: str, controls: list[str],
             extra: dict[str, Any] | None = None, process_cold: bool = True,
             prompts: list[str] | None = None, stop_after_distinct: int | None = None,
             requests: int | None = None) -> GateResult:
    # the client carries the row's controls' request fields (ctx.launch made it); `extra`: LoRA's
    chosen = select_prompts(ctx.profile.gate_prompts)
    if prompts is not None:
        chosen = [p for p in chosen if p.id in prompts] or chosen
    return run_gate(
        client, chosen, requests or ctx.profile.gate_requests, stop_after_distinct=stop_after_distinct,
        max_tokens_cap=ctx.profile.gate_max_tokens, logprobs=logprobs_for(ctx),
        concurrency=concurrency_of(ctx, [c for c in controls if c != LORA]), extra=extra, record=ctx.record_request,
        alive=running.alive, death_reason=death_reason_of(running),
        label=label, controls=controls, kind="controls", process_cold=process_cold,
    )


def run_configuration(ctx: StageContext, name: str, prompts: list[str] | None = None,
                      requests: int | None = None) -> ControlRow:
    """One row: a fresh runtime with the control, the gate on it (`prompts`: only these), stopped.

    A control row stops a prompt at its second answer; the default row, the comparison, runs in full.
    `requests`: a short gate of this many requests per prompt, in full (a launch of a transient row).
    """
    control = ctx.runtime.control(name)
    controls = [] if name == "default" else [name]
    row = ControlRow(configuration=name, controls=controls, description=control.description,
                     status="ok", concurrency=control.concurrency)
    try:
        with ctx.launch(controls=controls, inherit=False) as (running, client):
            row.startup_s = running.startup_s
            _ran_with(row, running)
            with EnergyMeter() as meter:
                stop = None if name == "default" or requests else CONTROL_STOP_AFTER_DISTINCT
                gate = _gate_on(ctx, running, client, name, controls, prompts=prompts,
                                stop_after_distinct=stop, requests=requests)
            return _with_energy(row_from_gate(row, gate), meter)
    except RuntimeStartError as exc:
        # refused: the log said the runtime does not support it; failed: it did not start for another reason
        row.status, row.reason = ("refused" if exc.refused else "failed"), exc.error_line or str(exc)
        log.warning("%s %s control %s: %s", ctx.runtime.name, "refused" if exc.refused else "failed to start with",
                    name, row.reason)
    except EnvironmentUnavailable as exc:
        row.status, row.reason = "skipped", str(exc)
    return row


def transient_prompts(gate: GateResult | None) -> list[str] | None:
    """The gate's varied prompts where every one varied only as a cold-start transient, else None."""
    spread = [p for p in (gate.prompts if gate else []) if p.distinct_answers > 1]
    if spread and all(p.pattern == "cold-transient" for p in spread):
        return [p.prompt_id for p in spread]
    return None


def cold_odd_of(prompt: Any) -> bool | None:
    """One launch's series of a prompt: its first answer alone differs (True), one answer (False),
    or the requests after the first differ among themselves (None)."""
    answers = list(prompt.answers)
    if len(answers) == 1:
        return False
    first = next((a for a in answers if 0 in a.indices), None)
    if len(answers) == 2 and first is not None and first.indices == [0]:
        return True
    return None


def run_transient_row(ctx: StageContext, name: str, prompts: list[str],
                      launches: int = TRANSIENT_LAUNCHES) -> ControlRow:
    """A row of `launches` launches (`launches_for` the matrix's controls), each a short gate of
    TRANSIENT_REQUESTS requests per prompt: whether each launch's first answer alone differs, the
    unit a transient is tested in."""
    first: ControlRow | None = None
    ran: list[ControlRow] = []
    odd: dict[str, list[bool | None]] = {pid: [] for pid in prompts}
    for i in range(launches):
        row = run_configuration(ctx, name, prompts=prompts, requests=TRANSIENT_REQUESTS)
        if row.status != "ok" or row.gate is None:
            if first is None:
                return row
            first.status, first.reason = row.status, f"launch {i + 1} of {launches}: {row.reason}"
            break
        ran.append(row)
        for p in row.gate.prompts:
            odd.setdefault(p.prompt_id, []).append(cold_odd_of(p))
        if first is None:
            first = row
        else:
            first.launches += 1
        if name != "default" and any(x is not False for xs in odd.values() for x in xs):
            break  # a control launch that varied cannot be credited: its row stops there
    assert first is not None
    first.cold_odd = odd
    pool_launches(first, ran)
    return first


def pool_launches(row: ControlRow, launches: list[ControlRow]) -> None:
    """A row of several launches: its tokens/s and its energy (each launch's gate, not its
    start-up) over all of them, not over the first alone."""
    if len(launches) < 2:
        return
    tokens = sum(gate_tokens(r.gate) for r in launches)
    http_s = sum(r.gate.http_s for r in launches if r.gate)
    row.tokens_per_s = round(tokens / http_s, 3) if http_s > 0 and tokens else None
    energies = [r.energy for r in launches]
    if all(e is not None for e in energies):
        joules = sum(e.joules for e in energies if e)
        wall = sum(e.wall_s for e in energies if e)
        row.energy = Energy(joules=round(joules, 3), wall_s=round(wall, 4),
                            mean_power_w=round(joules / wall, 2) if wall > 0 else None).with_tokens(tokens or None)
    else:
        row.energy = None  # a launch without a reading: no figure for the row rather than a part of one


# -- LoRA -----------------------------------------------------------------------------------------

def lora_dir(card: ModelCard) -> Path:
    from suite.paths import models_dir

    return models_dir() / card.name / "lora"


def adapter_path(card: ModelCard, fmt_kind: str) -> Path:
    """Where the test adapter of this model lives, in the form a runtime of `fmt_kind` loads."""
    if fmt_kind == "gguf":
        return lora_dir(card) / "gguf" / "adapter.gguf"
    return lora_dir(card) / "peft"


def ensure_adapter(card: ModelCard, fmt_kind: str) -> Path:
    """The model's small test adapter in the needed format, made once with peft if missing."""
    path = adapter_path(card, fmt_kind)
    ready = path.exists() if fmt_kind == "gguf" else (path / "adapter_config.json").exists()
    if ready:
        return path
    from suite.catalog import ensure_tools, prepare_format
    from suite.paths import cache_dir, runtime_prefix

    hf = next((n for n, f in card.formats.items() if f.kind == "hf"), None)
    if hf is None:
        raise EnvironmentUnavailable(f"model {card.name!r} has no HF format to make a test LoRA adapter from")
    base = prepare_format(card, hf)
    python = ensure_tools()
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "make_lora.py"
    cmd = [str(python), str(recipe), str(base), str(lora_dir(card))]
    if fmt_kind == "gguf":
        # the llama.cpp source the llamacpp recipe built from (images/llamacpp/build-llama-cpp.sh keeps
        # it under the cache's builds/src; older installs kept it in their own folder)
        converters = sorted([*(cache_dir() / "builds").glob("src/*/vendor/llama.cpp/convert_lora_to_gguf.py"),
                             *runtime_prefix("llamacpp").glob("src/*/vendor/llama.cpp/convert_lora_to_gguf.py")])
        if not converters:
            raise EnvironmentUnavailable("no convert_lora_to_gguf.py: install the llamacpp runtime first "
                                         "(its source tree carries the converter)")
        cmd += ["--gguf-converter", str(converters[-1])]
    log.info("making the test LoRA adapter of %s (%s)", card.name, fmt_kind)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["make_lora failed"])[-1]
        raise EnvironmentUnavailable(f"cannot make the test LoRA adapter: {last}")
    return path


def lora_request_fields(select: str, served_name: str, adapter: bool) -> dict[str, Any] | None:
    """The request fields that pick the base model or the adapter; None: no per-request choice."""
    if select == "model":
        return {"model": ADAPTER_NAME} if adapter else {"model": served_name}
    if select == "scale":
        return {"lora": [{"id": 0, "scale": 1.0 if adapter else 0.0}]}
    return None


def run_lora(ctx: StageContext) -> tuple[list[ControlRow], LoraOutcome]:
    caps = ctx.runtime.capabilities
    outcome = LoraOutcome(offered=caps.lora, select=caps.lora_select)
    rows: list[ControlRow] = []
    if not caps.lora:
        return rows, outcome
    fmt_kind = ctx.card.formats[ctx.arm.format].kind
    try:
        path = ensure_adapter(ctx.card, fmt_kind)
    except EnvironmentUnavailable as exc:
        outcome.status, outcome.reason = "skipped", str(exc)
        return [ControlRow(configuration="lora", controls=[LORA], status="skipped", reason=str(exc))], outcome
    outcome.adapter = str(path)
    same_process = caps.lora_select != "process"
    outcome.same_process = same_process
    labels = ["lora:base", "lora:adapter"] if same_process else ["lora:adapter (whole process)"]
    try:
        with ctx.launch(controls=[], inherit=False, lora=[LoraAdapter(ADAPTER_NAME, path)]) as (running, client):
            for n_label, label in enumerate(labels):
                is_adapter = "adapter" in label
                row = ControlRow(configuration=label, controls=[LORA], status="ok",
                                 description=("adapter " if is_adapter else "base model ") +
                                 ("selected per request" if same_process else "applied to every request"),
                                 startup_s=running.startup_s)
                _ran_with(row, running)
                fields = lora_request_fields(caps.lora_select, ctx.card.served_name, is_adapter)
                # The second label's requests reach a process that already served the first's.
                with EnergyMeter() as meter:
                    gate = _gate_on(ctx, running, client, label, [LORA], fields, process_cold=n_label == 0)
                rows.append(_with_energy(row_from_gate(row, gate), meter))
                if not running.alive():
                    break
    except RuntimeStartError as exc:
        outcome.status, outcome.reason = "refused", exc.error_line or str(exc)
        return [ControlRow(configuration="lora", controls=[LORA], status="refused", reason=outcome.reason)], outcome
    outcome.status = "ok" if all(r.status == "ok" for r in rows) else "failed"
    if not same_process:
        outcome.reason = (f"{ctx.runtime.name} applies the adapter to every request of the process "
                          "(no per-request selection): base and adapter cannot share one process")
    else:
        failed = next((r for r in rows if r.status != "ok" or any(v == 0 for v in r.answered.values())), None)
        if failed is not None:
            outcome.status = "failed"
            outcome.reason = failed.reason or next(
                (p.error_messages[0] for p in (failed.gate.prompts if failed.gate else []) if p.error_messages), None)
    return rows, outcome


def _modal_texts(row: ControlRow | None) -> dict[str, str]:
    if row is None or row.gate is None:
        return {}
    return {p.prompt_id: p.answers[0].text for p in row.gate.prompts if p.answers}


# -- the stage ------------------------------------------------------------------------------------

def run(ctx: StageContext) -> ControlsResult:
    requested = ctx.controls_request
    names = resolve_requested(ctx, requested)
    if "default" not in names:
        names.insert(0, "default")  # a control is judged against the default row of its own matrix
    prompts = [p.id for p in select_prompts(ctx.profile.gate_prompts)]
    automatic = bool(getattr(ctx, "automatic_controls", False))
    gate = ctx.results.get("gate")
    only: list[str] | None = None
    if automatic and gate is not None:
        # the bench's own elimination: only the prompts that gave more than one answer
        only = [p.prompt_id for p in gate.prompts if p.distinct_answers > 1] or None
        prompts = [pid for pid in prompts if only is None or pid in only]
    if automatic:
        # the LoRA rows eliminate nothing (they compare base and adapter): named, not automatic
        names = [n for n in names if n != LORA]
    # A cold-start transient comes once per launch: its rows are launches of a short gate, on the
    # prompts that showed it (LoRA's rows, which compare base and adapter, stay as they are).
    transient = transient_prompts(gate)
    if transient:
        prompts = [pid for pid in prompts if pid in transient] or transient
    # the rows are planned so that the corrected test can credit a control: Holm over the controls
    tested = sum(1 for n in names if n not in ("default", LORA))
    per_row = launches_for(tested) if transient else 1
    # Controls with a per-request form are tried inside one launch, before any launch row; they are
    # part of the same family (their level: the in-launch alpha over every control of the matrix).
    own = getattr(ctx, "own", None)
    chosen = (own(ControlsSettings) if own is not None else None) or settings(ctx.profile)
    in_launch = [n for n in names if n not in ("default", LORA) and chosen.in_launch
                 and ctx.runtime.control(n).per_request() is not None
                 and (not ctx.runtime.control(n).per_request().reset_cache  # type: ignore[union-attr]
                      or ctx.runtime.server.reset_cache_path)]
    result = ControlsResult(runtime=ctx.runtime.name, arm=ctx.arm_name, requested=list(requested or ["all"]),
                            n_requests=TRANSIENT_REQUESTS if transient else ctx.profile.gate_requests,
                            prompts=prompts, rows=[], automatic=automatic, launches_per_row=per_row)
    taken = ctx.carried.get(STAGE.name)  # a resumed run's finished rows
    carried = {r.configuration: r for r in taken.rows} if taken is not None else {}
    taken_up: list[str] = []
    pending = [n for n in in_launch if n not in carried]
    if pending:
        level = min(result.alpha, chosen.in_launch_alpha) / max(1, tested)
        result.rows.extend(run_in_launch_rows(ctx, pending, prompts, level, chosen))
    if automatic and in_launch and _settled_in_launch(result, prompts):
        # the cause is found inside one launch: the launch rows are not started (named, not run)
        credited = [r.configuration for r in result.rows if r.in_launch
                    and all(r.in_launch[pid].stop == "credit" for pid in prompts if pid in r.in_launch)]
        for name in names:
            if name in in_launch or name in ("default", LORA):
                continue
            result.rows.append(ControlRow(
                configuration=name, controls=[name], description=ctx.runtime.control(name).description,
                status="skipped", reason=(f"not started: {', '.join(credited)} already brings every prompt back "
                                          f"inside one launch; `--controls {name}` tries it")))
        names = []
    elif automatic and in_launch and not any(n not in in_launch and n not in ("default", LORA) for n in names):
        names = [n for n in names if n != "default"]  # no launch row to compare with a default one
    for name in names:
        if name in in_launch and name not in carried:
            continue
        t0 = time.monotonic()
        if name in carried:  # a resumed run: this row finished before the interruption
            result.rows.append(carried[name])
            taken_up.append(name)
            log.info("controls %s: %s taken up from the interrupted run (its request lines)", ctx.arm_name, name)
            continue
        if name == LORA:
            rows, outcome = run_lora(ctx)
            result.rows.extend(rows)
            base = next((r for r in rows if r.configuration == "lora:base"), None) or next(
                (r for r in result.rows if r.configuration == "default"), None)
            adapter = next((r for r in rows if r.configuration.startswith("lora:adapter")), None)
            b, a = _modal_texts(base), _modal_texts(adapter)
            common = set(a) & set(b)
            if common:
                outcome.adapter_changes_output = any(a[k] != b[k] for k in common)
            result.lora = outcome
        elif transient:
            result.rows.append(run_transient_row(ctx, name, prompts, per_row))
        else:
            result.rows.append(run_configuration(ctx, name, prompts=only))
        log.info("controls %s: %s done in %.0f s", ctx.arm_name, name, time.monotonic() - t0)
    if taken_up:
        result.interrupted = (f"resumed: {', '.join(taken_up)} finished before the run was interrupted and "
                              "were rebuilt from their request lines (no start-up time or energy for them)")
    eliminate(result, ctx.results.get("gate"))
    log.info("controls %s: %s", ctx.arm_name, result.elimination)
    return result


def run_in_launch_rows(ctx: StageContext, names: list[str], prompts: list[str], level: float,
                       chosen: ControlsSettings) -> list[ControlRow]:
    """One row per per-request control, all from one launch of the arm's own configuration."""
    gate_prompts = [p for p in select_prompts(ctx.profile.gate_prompts) if p.id in prompts]
    rows = {n: ControlRow(configuration=n, controls=[n], description=ctx.runtime.control(n).description,
                          status="ok", why=(ctx.runtime.control(n).per_request() or InLaunch()).why)
            for n in names}
    try:
        runs, running = run_controls(ctx, names, gate_prompts, level, ctx.profile.gate_max_tokens,
                                     max_pairs=chosen.max_pairs, effect=chosen.effect)
    except RuntimeStartError as exc:
        for row in rows.values():
            row.status, row.reason = ("refused" if exc.refused else "failed"), exc.error_line or str(exc)
        return list(rows.values())
    except EnvironmentUnavailable as exc:
        for row in rows.values():
            row.status, row.reason = "skipped", str(exc)
        return list(rows.values())
    for name, run in runs.items():
        row = rows[name]
        row.startup_s = running.startup_s
        _ran_with(row, running)
        row.ran_controls = [name]
        row.request_extra = dict((ctx.runtime.control(name).per_request() or InLaunch()).extra_body)
        row.in_launch = run.series
        row.tokens_per_s, row.paired_tokens_per_s, row.energy = run.tokens_per_s, run.paired_tokens_per_s, run.energy
        for pid, series in run.series.items():
            row.answered[pid] = series.with_answers
            row.distinct[pid] = series.with_distinct
            row.sent[pid] = series.requests
            row.modal_count[pid] = series.with_answers if series.with_distinct <= 1 else 0
        failed = next((s for s in run.series.values() if s.stop == "failed"), None)
        if failed is not None and not any(s.outcomes for s in run.series.values()):
            row.status, row.reason = "failed", failed.reason
    return list(rows.values())


def _settled_in_launch(result: ControlsResult, prompts: list[str]) -> bool:
    """Whether one in-launch row crossed its credit boundary on every prompt that varied."""
    return any(r.in_launch and all(pid in r.in_launch and r.in_launch[pid].stop == "credit" for pid in prompts)
               for r in result.rows)


def _in_launch_test(t: RowTest, row: ControlRow, pid: str, alpha: float) -> RowTest:
    """A control tried inside one launch on one prompt: its exact sequential test over the pairs."""
    series = row.in_launch[pid]
    res = series.result()
    t.unit = "pair"
    t.n, t.others = len(series.outcomes), res.against
    t.default_n, t.default_others = len(series.outcomes), res.favourable
    t.p_value = res.p_value if res.p_value is not None else 1.0
    t.stopped_early = series.stop in ("credit", "rule-out", "second-answer")
    head = (f"{row.configuration} on {pid}: in one launch, {len(series.outcomes)} pair"
            f"{'s' if len(series.outcomes) != 1 else ''} of requests with and without it in random order after a "
            f"first request without it and one with it{f' ({row.why})' if row.why else ''}: without it the answer differed from the "
            f"control's in {res.favourable}, the other way in {res.against}, alike in {res.concordant}")
    if series.stop == "failed":
        t.text = f"{head}; a request failed: {series.reason}"
        return t
    if series.with_distinct > 1:
        t.text = f"{head}; with it a second answer came (the series stopped there): not one answer"
        return t
    credited = res.decision == "credit" and t.p_value <= series.level
    t.credited = credited and t.p_value <= alpha
    seq = (f"exact sequential sign test at {series.level:.2g} over up to {series.max_pairs} pairs, "
           f"p = {t.p_value:.2g}")
    if credited:
        bound = unseen_share_bound(series.with_answers)
        seen = (f"a second answer with it in more than {bound:.0%} of requests would likely have shown" if bound
                else "too few to bound how often a second answer would come")
        t.text = (f"{head}; with it one answer in {series.with_answers} ({seen}): it changes the answer and brings "
                  f"it to one ({seq})")
    elif res.decision == "rule-out":
        t.text = (f"{head}: rules out that it changes the answer in {series.effect:.0%} of requests or more "
                  f"({seq})")
    else:
        t.text = f"{head}: undecided after {len(series.outcomes)} pairs ({seq})"
    return t


def row_test(row: ControlRow, default: ControlRow | None, pid: str, alpha: float = ELIMINATION_ALPHA) -> RowTest:
    """The control row against the default row on one prompt: Fisher's exact test of their
    other-than-modal answers, one-sided (the control has fewer), with the n of each row."""
    if pid in row.in_launch:
        return _in_launch_test(RowTest(prompt_id=pid, n=0, others=0, default_n=0, default_others=0),
                               row, pid, alpha)
    assert default is not None
    n, d_n = row.answered.get(pid, 0), default.answered.get(pid, 0)
    others = n - row.modal_count.get(pid, n)
    d_others = d_n - default.modal_count.get(pid, d_n)
    t = RowTest(prompt_id=pid, n=n, others=others, default_n=d_n, default_others=d_others,
                stopped_early=row.sent.get(pid, n) < (row.gate.n_requests if row.gate else n))
    if n == 0 or d_n == 0:
        t.text = f"{row.configuration} on {pid}: no answer in {'the row' if n == 0 else 'the default row'}"
        return t
    if pid in row.cold_odd and pid in default.cold_odd:
        return _launches_test(t, row, default, alpha)
    if row.distinct.get(pid, 0) <= 1 and _pattern(default, pid) == "cold-transient":
        return _launch_test(t, row, default, alpha)
    t.p_value = fisher_fewer_others(others, n, d_others, d_n)
    if row.distinct.get(pid, 0) > 1:
        t.text = (f"{row.configuration} on {pid}: a second answer after {row.sent.get(pid, n)} requests"
                  + (" (the row stopped there)" if t.stopped_early else f" ({row.distinct[pid]} distinct in {n})"))
        return t
    assert t.p_value is not None
    t.credited = t.p_value <= alpha
    versus = (f"one answer in {n} against {d_others} other answer{'s' if d_others != 1 else ''} in {d_n} at "
              f"default (one-sided Fisher's exact test p = {t.p_value:.2g}")
    if t.credited:
        t.text = f"{row.configuration} on {pid}: {versus} <= {alpha:g})"
    else:
        t.needed = requests_needed(d_others / d_n, alpha) if d_others else None
        need = (f"about {t.needed} requests per row would tell" if t.needed else
                "the default row showed no other answer here, nothing to tell apart" if not d_others else
                "more requests than the suite would send would be needed")
        t.text = f"{row.configuration} on {pid}: {versus} > {alpha:g}): cannot tell; {need}"
    return t


def _prompt(row: ControlRow, pid: str) -> Any | None:
    """The row's gate result for one prompt, if it ran."""
    return next((p for p in (row.gate.prompts if row.gate else []) if p.prompt_id == pid), None)


def _pattern(row: ControlRow, pid: str) -> str | None:
    """How the row's answers to one prompt varied (suite.analysis.repro's pattern), if it ran."""
    prompt = _prompt(row, pid)
    return prompt.pattern if prompt is not None else None


def _launch_test(t: RowTest, row: ControlRow, default: ControlRow, alpha: float) -> RowTest:
    """A control against a default row whose odd answer is a cold-start transient.

    Such a difference comes once per launch (the first request of the prompt, before a cache
    holds it), however many requests follow: more requests per row cannot tell a control that
    removes it from chance, more launches can. The unit is the launch: each row is one launch,
    and the default's launch showed the transient. One-sided Fisher's exact test over launches.
    """
    t.unit = "launch"
    launches, d_launches = 1, 1
    t.p_value = fisher_fewer_others(0, launches, 1, d_launches)
    assert t.p_value is not None
    t.credited = t.p_value <= alpha
    versus = (f"one answer in {t.n}, where the default row's other answer is a cold-start transient (its first "
              f"request only, once per launch), so launches are the unit: 0 of {launches} launch with it against "
              f"1 of {d_launches} at default (one-sided Fisher's exact test p = {t.p_value:.2g}")
    if t.credited:
        t.text = f"{row.configuration} on {t.prompt_id}: {versus} <= {alpha:g})"
    else:
        t.needed = requests_needed(1.0, alpha)
        t.text = (f"{row.configuration} on {t.prompt_id}: {versus} > {alpha:g}): cannot tell; about {t.needed} "
                  f"launches per row would tell")
    return _with_cold_note(t, row, default)


def _with_cold_note(t: RowTest, row: ControlRow, default: ControlRow) -> RowTest:
    """What the answers are, not a test: where the control's every answer is the one the default's
    cold first request gave, not the one its later requests gave, the verdict says so."""
    if _same_as_cold(row, default, t.prompt_id):
        t.text += "; its one answer is the default row's first (cold) answer, not the later one"
    return t


def _same_as_cold(row: ControlRow, default: ControlRow, pid: str) -> bool:
    """Whether a one-answer row answered what the default row's cold first request answered."""
    def answers(r: ControlRow) -> list[Any]:
        prompt = _prompt(r, pid)
        return list(prompt.answers) if prompt is not None else []

    mine, theirs = answers(row), answers(default)
    cold = next((a for a in theirs if a.first_index == 0 and a.rank > 0), None)
    if len(mine) != 1 or cold is None:
        return False
    if mine[0].token_ids is not None and cold.token_ids is not None:
        return mine[0].token_ids == cold.token_ids
    return mine[0].text == cold.text


def _launches_test(t: RowTest, row: ControlRow, default: ControlRow, alpha: float) -> RowTest:
    """A transient row against the default row, launch by launch: in how many launches did the
    prompt's first answer alone differ. One-sided Fisher's exact test over launches; credited
    only where the control's every launch gave one answer."""
    t.unit = "launch"
    mine, theirs = row.cold_odd[t.prompt_id], default.cold_odd[t.prompt_id]
    c, lc = sum(1 for x in mine if x), len(mine)
    d, ld = sum(1 for x in theirs if x), len(theirs)
    t.n, t.others, t.default_n, t.default_others = lc, c, ld, d
    unit = "launch" if lc == 1 else "launches"
    head = (f"{row.configuration} on {t.prompt_id}: the first answer alone differed in {c} of {lc} {unit} "
            f"against {d} of {ld} at default (a cold-start transient comes once per launch: launches are the unit")
    if any(x is None for x in mine):
        t.text = f"{head}); the requests after the first differed among themselves in a launch: not one answer"
        return t
    t.p_value = fisher_fewer_others(c, lc, d, ld)
    assert t.p_value is not None
    t.credited = c == 0 and t.p_value <= alpha
    versus = f"{head}; one-sided Fisher's exact test p = {t.p_value:.2g}"
    if t.credited:
        t.text = f"{versus} <= {alpha:g})"
    elif not d:
        t.text = f"{versus} > {alpha:g}): the default showed no transient in its launches, nothing to tell apart"
    else:
        t.needed = requests_needed(d / ld, alpha)
        t.text = (f"{versus} > {alpha:g}): cannot tell"
                  + (f"; about {t.needed} launches per row would tell" if t.needed else ""))
    return _with_cold_note(t, row, default) if c == 0 else t


def eliminate(result: ControlsResult, gate: GateResult | None) -> None:
    """Which control, if any, brings the prompts that varied back to one answer each, by a test.

    Credited: the control's row gave one answer on every prompt that varied and, on each, fewer
    other-than-modal answers than the same matrix's default row by a one-sided Fisher's exact test
    (each prompt must pass: the control's p is the largest of its prompts', an intersection-union
    test that needs no correction for requiring all), and that p, corrected over the matrix's
    controls (Holm: the family is every control row that ran), at most `result.alpha`. With six
    controls of no effect, crediting each at 5 % named one falsely in 7.3 % of matrices; corrected,
    at most 5 %. A control that passes alone but not over the family is named as such.
    """
    default = next((r for r in result.rows if r.configuration == "default" and r.status == "ok"), None)
    if gate is not None:
        spread = [p.prompt_id for p in gate.prompts if p.distinct_answers > 1]
    elif default is not None:
        spread = [pid for pid, d in default.distinct.items() if d > 1]
    else:
        spread = []
    result.spread_prompts = spread
    if not spread:
        result.elimination = "the answers did not vary: nothing to eliminate"
        return
    tried = [r for r in result.rows if r.configuration != "default" and r.status == "ok"
             and not r.configuration.startswith("lora")]
    refused = [r.configuration for r in result.rows if r.status in ("refused", "failed")]
    tail = f"; refused or failed: {', '.join(refused)}" if refused else ""
    if default is None and not any(r.in_launch for r in tried):
        result.restoring = []
        result.elimination = ("no default row ran in this matrix: a control can only be credited against it"
                              + tail)
        return
    d_text = ", ".join(
        f"{pid}: first answer alone different in {sum(1 for x in default.cold_odd[pid] if x)} of "
        f"{len(default.cold_odd[pid])} launches" if pid in default.cold_odd else
        f"{pid} {default.distinct.get(pid, 0)} distinct in {default.answered.get(pid, 0)}"
        for pid in spread) if default is not None else ""
    for r in tried:
        if default is None and not r.in_launch:
            continue
        r.tests = [row_test(r, default, pid, result.alpha) for pid in spread if pid in r.answered]
        whole = len(r.tests) == len(spread) and all(t.p_value is not None for t in r.tests)
        r.p_value = max(t.p_value for t in r.tests if t.p_value is not None) if whole else None
    # the controls of the matrix are one family: Holm over their tests
    # a control the matrix planned but did not start (the cause was found inside one launch) stays
    # in the family, as a test that found nothing (p = 1)
    unstarted = [r for r in result.rows if r.status == "skipped" and (r.reason or "").startswith("not started")]
    adjusted = holm([r.p_value for r in tried] + [1.0] * len(unstarted))
    result.family, result.correction = len(tried) + len(unstarted), "Holm"
    for r, a in zip(tried, adjusted[:len(tried)], strict=True):
        r.p_adjusted = a
    result.restoring = [r.configuration for r in tried
                        if len(r.tests) == len(spread) and all(t.credited for t in r.tests)
                        and r.p_adjusted is not None and r.p_adjusted <= result.alpha]
    family = (f"{result.family} control{'s' if result.family != 1 else ''} tested, Holm"
              if result.family > 1 else "1 control tested")
    tests = ([f"one-sided Fisher's exact test against the default row ({d_text})"] if default is not None and any(
        not r.in_launch for r in tried) else []) + (
        ["exact sequential sign tests of pairs inside one launch"] if any(r.in_launch for r in tried) else [])
    how = f"{' and '.join(tests) or 'no test'} at {result.alpha:g} over the matrix ({family})"
    if result.restoring:
        lines = "; ".join(t.text for r in tried if r.configuration in result.restoring for t in r.tests)
        for r in tried:
            if r.configuration not in result.restoring:
                continue
            cut = truncation_by_prompt(r.gate)
            capped = [pid for pid in spread if pid in cut and cut[pid][0] and cut[pid][0] >= r.answered.get(pid, 0)]
            if capped:
                tail = (f"; up to the cap: every answer of {r.configuration} on {', '.join(capped)} was cut at "
                        f"{cut[capped[0]][1]} tokens, answers may differ past it") + tail
        adj = ", ".join(f"{r.configuration} p = {r.p_adjusted:.2g}" for r in tried
                        if r.configuration in result.restoring and r.p_adjusted is not None)
        result.elimination = (f"{', '.join(result.restoring)} bring(s) {', '.join(spread)} back to one answer "
                              f"({lines}; {how}: adjusted {adj}){tail}")
    else:
        near = [r for r in tried if len(r.tests) == len(spread) and all(t.credited for t in r.tests)]
        held = ("; " + ", ".join(f"{r.configuration} passes on its own (p = {r.p_value:.2g}) but not over the "
                                 f"{len(tried)} controls (Holm-adjusted p = {r.p_adjusted:.2g})"
                                 for r in near if r.p_value is not None and r.p_adjusted is not None)
                if near else "")
        lines = "; ".join(t.text for r in tried for t in r.tests)
        result.elimination = (f"no control of the {len(tried)} that ran is shown to bring {', '.join(spread)} back "
                              f"to one answer{partial_credits(tried, result.alpha, len(spread))}{held} "
                              f"({lines or 'no control row answered'}; {how}){tail}")


def partial_credits(tried: list[ControlRow], alpha: float, prompts: int) -> str:
    """Where no control brings every prompt back: the controls that bring some prompt back on its
    own, named only where the test would hold over every prompt test of the matrix (Bonferroni:
    p <= alpha / tests), so that the chance of naming any by chance stays within alpha. Empty
    where there is none, or where the matrix varied on one prompt only (the verdict says it)."""
    tests = [t for r in tried for t in r.tests if t.p_value is not None]
    if prompts < 2 or not tests:
        return ""
    level = alpha / len(tests)
    named = [(r.configuration, t) for r in tried for t in r.tests
             if t.credited and t.p_value is not None and t.p_value <= level]
    if not named:
        return ""
    return ("; on a prompt of its own: " + ", ".join(f"{c} brings {t.prompt_id} back (p = {t.p_value:.2g})"
                                                    for c, t in named)
            + f", each p <= {alpha:g} / {len(tests)} (Bonferroni over the matrix's {len(tests)} prompt tests)")


def rebuild(lines: list[Any], before: Any) -> ControlsResult | None:
    """The rows a control matrix finished before its run stopped (a time limit, a kill), rebuilt
    from the run's request lines, in the order they ran; `before` holds the stages the run finished
    (its gate: the prompts that varied, for the elimination).

    A row is kept only where it finished: the default row every prompt's full series (as many
    requests as its longest), a control row each prompt at that count or at its second answer
    (where a control row stops). A row cut mid-way is named and left out of the elimination; a
    row whose runtime never answered left no line and is not known. Start-up times, commands and
    energy are not in request lines: they are absent, not guessed. None where the lines cannot
    say which rows finished (a matrix of launches: a cold-start transient's rows; LoRA's rows) or
    where no row finished.
    """
    gate: GateResult | None = getattr(before, "gate", None)
    by_label: dict[str, list[Any]] = {}
    for q in lines:
        if getattr(q, "kind", None) == "controls":
            by_label.setdefault(q.label, []).append(q)
    if (not by_label or transient_prompts(gate) or any(k.startswith(LORA) for k in by_label)
            or any(k.endswith((":with", ":without", ":first")) for k in by_label)):
        return None  # launches of a transient, LoRA's rows, pairs inside a launch: not rebuilt
    order = [p.prompt_id for p in gate.prompts] if gate else []
    prompts = list(dict.fromkeys(sorted({q.prompt_id for qs in by_label.values() for q in qs},
                                        key=lambda pid: (order.index(pid) if pid in order else len(order), pid))))
    # the series' length: the gate's (a matrix's rows send as many), else the default row's longest
    default_lines = by_label.get("default", [])
    n = gate.n_requests if gate else max((sum(1 for q in default_lines if q.prompt_id == pid) for pid in prompts),
                                         default=0)
    known = {p.id: p for p in select_prompts(None)}
    rows: list[ControlRow] = []
    cut: list[str] = []
    for label, qs in by_label.items():
        series: dict[str, list[Sample]] = {}
        for q in qs:
            series.setdefault(q.prompt_id, []).append(Sample(
                index=q.index, text=q.text or "", token_ids=q.token_ids, logprobs=q.logprobs,
                top_logprobs=getattr(q, "top_logprobs", None), completion_tokens=q.completion_tokens,
                finish_reason=q.finish_reason, error=q.error))
        stop = None if label == "default" else CONTROL_STOP_AFTER_DISTINCT
        finished = n > 0 and all(
            pid in series and (len(series[pid]) >= n or (stop is not None and len(group_answers(series[pid])) >= stop))
            for pid in prompts)
        if not finished:
            cut.append(f"{label} ({sum(len(v) for v in series.values())} requests)")
            continue
        results = []
        for i, pid in enumerate(prompts):
            first = next(q for q in qs if q.prompt_id == pid)
            a = analyse(series[pid], process_cold=i == 0)
            results.append(GatePromptResult.from_analysis(
                a, prompt_id=pid, prompt_version=getattr(first, "prompt_version", 1) or 1,
                prompt_sha256=getattr(first, "prompt_sha256", "") or "",
                kind=known[pid].kind if pid in known else "completion", max_tokens=first.max_tokens or 0,
                error_messages=list(dict.fromkeys(s.error for s in series[pid] if s.error))[:5],
                prompt_tokens=sorted({q.prompt_tokens for q in qs if q.prompt_id == pid
                                      and getattr(q, "prompt_tokens", None) is not None})))
        reproducible, verdict = verdict_of(results, None)
        head = qs[0]
        controls = list(getattr(head, "controls", None) or [])
        concurrency = getattr(head, "concurrency", None) or 1
        gate_of_row = GateResult(
            label=label, controls=controls, n_requests=n, concurrency=concurrency,
            request_extra=dict(getattr(head, "request_extra", None) or {}), seed=head.seed,
            temperature=head.temperature or 0.0, logprobs=any(q.logprobs for q in qs), prompts=results,
            reproducible=reproducible, verdict=verdict, wall_s=0.0, http_s=round(sum(q.e2e_s or 0.0 for q in qs), 4))
        row = ControlRow(configuration=label, controls=controls, status="ok", concurrency=concurrency,
                         ran_controls=controls)
        rows.append(row_from_gate(row, gate_of_row))
    if not rows:
        return None  # nothing finished: the page names the lines kept, and no more
    result = ControlsResult(runtime=getattr(before, "runtime", "") or "", arm=getattr(before, "arm", "") or "",
                            requested=["unknown"], n_requests=n, prompts=prompts, rows=rows,
                            automatic=bool(gate is not None and gate.reproducible is False))
    eliminate(result, gate)
    result.interrupted = (
        f"the run stopped before the matrix's end: {len(rows)} finished row{'s' if len(rows) != 1 else ''} "
        f"rebuilt from its request lines ({', '.join(r.configuration for r in rows) or 'none'})"
        + (f"; cut mid-way and left out: {', '.join(cut)}" if cut else "")
        + "; a row whose runtime never answered left no line; start-up times and energy are not kept in "
          "request lines")
    return result


def recompute(result: ControlsResult, summary: Any = None) -> ControlsResult:
    """The elimination made again from the rows' answers with today's test and correction."""
    again = result.model_copy(deep=True)
    again.alpha = ELIMINATION_ALPHA  # today's level, not the one the record was written with
    eliminate(again, getattr(summary, "gate", None))
    return again


def row_costs(row: ControlRow, default: ControlRow | None) -> dict[str, float]:
    """A row's tokens/s and J/token against the default row's, where both rows sent the same
    requests per prompt (a row that stopped early has another mix of prompts: no ratio). A row
    tried inside one launch: its requests with the control against those without, the same prompts."""
    if row.in_launch:
        if row.tokens_per_s and row.paired_tokens_per_s:
            return {"tokens_per_s": row.tokens_per_s / row.paired_tokens_per_s}
        return {}
    if default is None or row.sent != default.sent:
        return {}
    out: dict[str, float] = {}
    if row.tokens_per_s and default.tokens_per_s:
        out["tokens_per_s"] = row.tokens_per_s / default.tokens_per_s
    if row.energy and default.energy and row.energy.j_per_token and default.energy.j_per_token:
        out["j_per_token"] = row.energy.j_per_token / default.energy.j_per_token
    return out


def claims(result: ControlsResult, summary: Any) -> list[Claim]:
    """The elimination (what restores one answer, if anything) and one claim per control row
    tested, each with its p, its Holm-adjusted p over the matrix's controls and its cost."""
    arm, run_id, extra = getattr(summary, "arm", ""), getattr(summary, "run_id", ""), run_caveats(summary, "controls")
    default = next((r for r in result.rows if r.configuration == "default" and r.status == "ok"), None)
    tried = [r for r in result.rows if r.configuration != "default" and not r.configuration.startswith("lora")]
    family = (Family(name="controls", size=result.family, correction="Holm", alpha=result.alpha)
              if result.family > 1 else None)
    unit = "launches" if result.launches_per_row > 1 else "requests"
    out: list[Claim] = []
    for r in tried:
        verdict: str
        if r.status != "ok":
            verdict, good = r.status, None
        elif r.answered and not any(r.answered.values()):
            verdict, good = "every request failed", None
        elif r.configuration in result.restoring:
            verdict, good = "restores one answer", True
        elif r.tests and all(t.credited for t in r.tests):
            verdict, good = "passes alone, not over the matrix", None
        elif any(r.distinct.get(pid, 0) > 1 for pid in result.spread_prompts):
            verdict, good = "still varies", False
        elif r.in_launch and all(s.stop == "rule-out" for s in r.in_launch.values()):
            verdict, good = "no effect of the stated size", False
        else:
            verdict, good = "not shown", None
        cut = sum(t.n for t in r.tests)
        row_unit = "pairs inside one launch" if r.in_launch else unit
        test = ("exact sequential sign test of pairs with and without it inside one launch" if r.in_launch
                else "one-sided Fisher's exact test against the default row")
        out.append(Claim(stage="controls", kind="control", arm=arm, run_id=run_id, configuration=r.configuration,
                         prompt=", ".join(result.spread_prompts) or None, verdict=verdict, good=good,
                         counts={"answered": sum(r.answered.values()), "launches": r.launches,
                                 "requests": sum(r.sent.values())},
                         evidence=Evidence(test=test, n=cut or None, unit=row_unit, p=r.p_value,
                                           p_adjusted=r.p_adjusted),
                         family=family, cost=row_costs(r, default),
                         caveats=[f"every answer on {pid} cut at {cap} tokens: answers may differ past the cap"
                                  for pid, (n_cut, cap) in truncation_by_prompt(r.gate).items()
                                  if pid in result.spread_prompts and n_cut and n_cut >= r.answered.get(pid, 0)]
                         + list(extra),
                         phrase=f"{r.configuration}: {verdict}",
                         text="; ".join(t.text for t in r.tests) or (r.reason or verdict)))
    if not result.spread_prompts:
        word, good = "nothing to eliminate", None
    elif result.restoring:
        word, good = f"{', '.join(result.restoring)} restores one answer", True
    elif default is None:
        word, good = "no default row", None
    else:
        word, good = "nothing tested restores one answer", False
    out.insert(0, Claim(stage="controls", kind="elimination", arm=arm, run_id=run_id,
                        prompt=", ".join(result.spread_prompts) or None, verdict=word, good=good,
                        counts={"controls": len(tried), "launches_per_row": result.launches_per_row},
                        evidence=Evidence(test="one-sided Fisher's exact test against the default row", unit=unit,
                                          p_adjusted=min((r.p_adjusted for r in tried if r.p_adjusted is not None),
                                                         default=None)),
                        family=family, caveats=list(extra), phrase=word, text=result.elimination))
    return out


def format_controls_table(result: ControlsResult) -> Table:
    """configuration -> distinct answers and lengths (count), per prompt, as a rich table."""
    launches = f" x {result.launches_per_row} launches" if result.launches_per_row > 1 else ""
    table = Table(title=Text(f"{result.arm} ({result.runtime}): gate per configuration, "
                             f"{result.n_requests} requests{launches}"))
    table.add_column("configuration")
    table.add_column("status")
    for pid in result.prompts:
        table.add_column(Text(f"{pid}: distinct"), justify="right")
        table.add_column(Text(f"{pid}: lengths (count)"))
    table.add_column("cold = modal")
    for row in result.rows:
        cells = [row.configuration + (f" ×{row.concurrency}" if row.concurrency > 1 else ""),
                 row.status + (f": {row.reason}" if row.reason else "")]
        for pid in result.prompts:
            if pid in row.distinct:
                stopped = (f" (stopped at {row.sent[pid]})" if row.gate and row.sent.get(pid, row.gate.n_requests)
                           < row.gate.n_requests else "")
                cells += [f"{row.distinct[pid]}/{row.answered.get(pid, 0)}{stopped}", row.lengths.get(pid, "")]
            else:
                cells += ["-", "-"]
        colds = [v for v in row.cold_is_modal.values() if v is not None]
        cells.append("-" if not colds else ("yes" if all(colds) else "no"))
        table.add_row(*[Text(c) for c in cells])  # text as it is: never parsed as markup
    captions = [result.elimination] if result.elimination else []
    if result.lora is not None and result.lora.reason:
        captions.append(f"LoRA: {result.lora.reason}")
    table.caption = Text("\n".join(captions)) if captions else None
    return table


def export_rows(result: ControlsResult) -> list[dict[str, Any]]:
    """`suite export`'s controls table: one row per control configuration and gate prompt."""
    rows: list[dict[str, Any]] = []
    for row in result.rows:
        e = row.energy
        base = {"configuration": row.configuration, "status": row.status, "reason": row.reason,
                "concurrency": row.concurrency, "startup_s": row.startup_s,
                "controls": list(row.ran_controls),
                "tokens_per_s": row.tokens_per_s, "energy_j": e.joules if e else None,
                "j_per_token": e.j_per_token if e else None,
                "mean_power_w": e.mean_power_w if e else None}
        base["unit"] = row.unit
        cut = truncation_by_prompt(row.gate)
        if not row.distinct:
            rows.append(base)
        for pid, d in row.distinct.items():
            series = row.in_launch.get(pid)
            res = series.result() if series is not None else None
            pairs = {} if series is None or res is None else {
                "pairs": len(series.outcomes), "pairs_differ": res.favourable, "pairs_other_way": res.against,
                "pairs_alike": res.concordant, "sequential_stop": series.stop, "sequential_p": res.p_value,
                "sequential_level": series.level}
            rows.append(base | pairs | {"prompt_id": pid, "distinct_answers": d, "answered": row.answered.get(pid),
                                **dict(zip(("answer_lengths_tokens", "answer_length_counts"),
                                           length_lists(row.lengths.get(pid)), strict=True)),
                                "truncated": cut.get(pid, (None, None))[0],
                                "max_tokens": cut.get(pid, (None, None))[1]})
    return rows


def carries_line(part: ControlsResult, line: dict[str, Any]) -> bool:
    """Whether a resumed run keeps a request line of an earlier one: a finished row's (a row tried
    inside one launch labels its lines "NAME:with", "NAME:without" and "NAME:first")."""
    label = str(line.get("label"))
    if label in {r.configuration for r in part.rows}:
        return True
    name, _, side = label.rpartition(":")
    return side in ("with", "without", "first") and name in {r.configuration for r in part.rows if r.in_launch}


COLUMNS: dict[str, ColumnType] = {
    "configuration": "str", "status": "str", "reason": "str", "concurrency": "int", "startup_s": "float",
    "controls": "list[str]", "tokens_per_s": "float", "energy_j": "float", "j_per_token": "float",
    "mean_power_w": "float", "prompt_id": "str", "distinct_answers": "int", "answered": "int",
    "answer_lengths_tokens": "list[int]", "answer_length_counts": "list[int]", "truncated": "int", "max_tokens": "int",
    # the row's unit (request, launch, pair) and, for a row tried inside one launch, its pairs per prompt
    "unit": "str", "pairs": "int", "pairs_differ": "int", "pairs_other_way": "int", "pairs_alike": "int",
    "sequential_stop": "str", "sequential_p": "float", "sequential_level": "float"}


STAGE = Stage(name="controls", result=ControlsResult, run=run, lines=(AnswerLine,), fresh_runtimes=True, in_bench=False,
              summary="the gate once per determinism control, each on a fresh runtime",
              inputs=lambda p: select_prompts(p.gate_prompts),
              planned=None,  # its rows depend on the runtime's controls: a count and a rate, no total
              # the process of elimination: where the gate found more than one answer, one control
              # at a time, after the rest (its setting `auto`); asked for (--controls), right
              # after the gate
              when=lambda p: settings(p).auto, on_verdict=False, after="gate",
              settings=ControlsSettings, profiles={"quick": {"auto": False}}, profile_keys={"auto_controls": "auto"},
              options=(StageOption("--controls", "names", "'all' or control names: run the control matrix after "
                                   "the gate, whatever the gate found.", kind="strs"),
                       StageOption("--auto-controls/--no-auto-controls", "auto", "Run the control matrix when the "
                                   "gate finds more than one answer (default: the profile's).", kind="bool")),
              preflight=preflight,
              tables=(ExportTable("controls", export_rows, COLUMNS),), exported_requests=("controls",),
              rebuild=rebuild, carries_line=carries_line,
              page_title="control matrix", recompute=recompute, claims=claims,
              section=SectionTemplate("section.html", "suite.stages.controls.view:page", slot="causes", order=1, on_run_page=False))

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

`format_controls_table` renders the result as the table the CLI prints.
"""

from __future__ import annotations

import logging
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field
from rich.table import Table
from rich.text import Text

from suite.stages.base import Stage
from suite.errors import EnvironmentUnavailable, RuntimeStartError, SuiteError
from suite.gpu import Energy, EnergyMeter
from suite.launchers.base import LoraAdapter
from suite.stages.gate import GateResult, concurrency_of, death_reason_of, logprobs_for, run_gate, select_prompts

if TYPE_CHECKING:
    from suite.catalog import ModelCard
    from suite.stages.base import StageContext

log = logging.getLogger(__name__)


LORA = "lora"
ADAPTER_NAME = "suite-test-lora"


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
    reproducible: bool | None = None
    gate: GateResult | None = None


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


# -- configurations -------------------------------------------------------------------------------

def resolve_requested(ctx: "StageContext", requested: list[str] | None) -> list[str]:
    """`all` -> default + every control (+ lora where offered); else the names, checked."""
    names = list(requested or ["all"])
    runtime = ctx.runtime
    if "all" in names:
        out = ["default", *runtime.controls]
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


def _row_from_gate(row: ControlRow, gate: GateResult) -> ControlRow:
    row.gate = gate
    row.reproducible = gate.reproducible
    row.request_extra = dict(gate.request_extra)
    tokens = sum((a.n_tokens or 0) * a.count for p in gate.prompts for a in p.answers)
    row.tokens_per_s = round(tokens / gate.http_s, 3) if gate.http_s > 0 and tokens else None
    for p in gate.prompts:
        row.distinct[p.prompt_id] = p.distinct_answers
        row.answered[p.prompt_id] = p.answered
        row.lengths[p.prompt_id] = p.lengths_text
        row.cold_is_modal[p.prompt_id] = p.cold_warm.cold_is_modal if p.cold_warm else None
    if gate.stopped_reason:
        row.status, row.reason = "failed", gate.stopped_reason
    return row


def _with_energy(row: ControlRow, meter: EnergyMeter) -> ControlRow:
    """The row's energy over its gate, per output token of the gate's answers."""
    gate = row.gate
    tokens = sum((a.n_tokens or 0) * a.count for p in gate.prompts for a in p.answers) if gate else 0
    row.energy = meter.result(tokens or None)
    return row


def _gate_on(ctx: "StageContext", running: Any, client: Any, label: str, controls: list[str],
             extra: dict[str, Any] | None = None, process_cold: bool = True) -> GateResult:
    # the client carries the row's controls' request fields (ctx.launch made it); `extra`: LoRA's
    return run_gate(
        client, select_prompts(ctx.profile.gate_prompts), ctx.profile.gate_requests,
        max_tokens_cap=ctx.profile.gate_max_tokens, logprobs=logprobs_for(ctx),
        concurrency=concurrency_of(ctx, [c for c in controls if c != LORA]), extra=extra, record=ctx.record_request, alive=running.alive, death_reason=death_reason_of(running),
        label=label, controls=controls, kind="controls", process_cold=process_cold,
    )


def run_configuration(ctx: "StageContext", name: str) -> ControlRow:
    control = ctx.runtime.control(name)
    controls = [] if name == "default" else [name]
    row = ControlRow(configuration=name, controls=controls, description=control.description,
                     status="ok", concurrency=control.concurrency)
    try:
        with ctx.launch(controls=controls, inherit=False) as (running, client):
            row.startup_s = running.startup_s
            _ran_with(row, running)
            with EnergyMeter() as meter:
                gate = _gate_on(ctx, running, client, name, controls)
            return _with_energy(_row_from_gate(row, gate), meter)
    except RuntimeStartError as exc:
        # refused: the log said the runtime does not support it; failed: it did not start for another reason
        row.status, row.reason = ("refused" if exc.refused else "failed"), exc.error_line or str(exc)
        log.warning("%s %s control %s: %s", ctx.runtime.name, "refused" if exc.refused else "failed to start with",
                    name, row.reason)
    except EnvironmentUnavailable as exc:
        row.status, row.reason = "skipped", str(exc)
    return row


# -- LoRA -----------------------------------------------------------------------------------------

def lora_dir(card: "ModelCard") -> Path:
    from suite.paths import models_dir

    return models_dir() / card.name / "lora"


def adapter_path(card: "ModelCard", fmt_kind: str) -> Path:
    """Where the test adapter of this model lives, in the form a runtime of `fmt_kind` loads."""
    if fmt_kind == "gguf":
        return lora_dir(card) / "gguf" / "adapter.gguf"
    return lora_dir(card) / "peft"


def ensure_adapter(card: "ModelCard", fmt_kind: str) -> Path:
    """The model's small test adapter in the needed format, made once with peft if missing."""
    path = adapter_path(card, fmt_kind)
    ready = path.exists() if fmt_kind == "gguf" else (path / "adapter_config.json").exists()
    if ready:
        return path
    from suite.catalog import ensure_tools, prepare_format
    from suite.paths import runtime_prefix

    hf = next((n for n, f in card.formats.items() if f.kind == "hf"), None)
    if hf is None:
        raise EnvironmentUnavailable(f"model {card.name!r} has no HF format to make a test LoRA adapter from")
    base = prepare_format(card, hf)
    python = ensure_tools()
    recipe = Path(__file__).resolve().parent.parent / "recipes" / "make_lora.py"
    cmd = [str(python), str(recipe), str(base), str(lora_dir(card))]
    if fmt_kind == "gguf":
        converters = sorted(runtime_prefix("llamacpp").glob("src/*/vendor/llama.cpp/convert_lora_to_gguf.py"))
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


def run_lora(ctx: "StageContext") -> tuple[list[ControlRow], LoraOutcome]:
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
                rows.append(_with_energy(_row_from_gate(row, gate), meter))
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

def run(ctx: "StageContext") -> ControlsResult:
    requested = ctx.controls_request
    names = resolve_requested(ctx, requested)
    prompts = [p.id for p in select_prompts(ctx.profile.gate_prompts)]
    result = ControlsResult(runtime=ctx.runtime.name, arm=ctx.arm_name, requested=list(requested or ["all"]),
                            n_requests=ctx.profile.gate_requests, prompts=prompts, rows=[])
    for name in names:
        t0 = time.monotonic()
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
        else:
            result.rows.append(run_configuration(ctx, name))
        log.info("controls %s: %s done in %.0f s", ctx.arm_name, name, time.monotonic() - t0)
    eliminate(result, ctx.results.get("gate"))
    log.info("controls %s: %s", ctx.arm_name, result.elimination)
    return result


def eliminate(result: ControlsResult, gate: GateResult | None) -> None:
    """Which control, if any, brings the prompts that varied back to one answer each."""
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
    result.restoring = [
        r.configuration for r in result.rows
        if r.configuration != "default" and r.status == "ok"
        and all(r.distinct.get(pid) == 1 and r.answered.get(pid, 0) >= 2 for pid in spread)]
    tried = [r.configuration for r in result.rows if r.configuration != "default" and r.status == "ok"]
    refused = [r.configuration for r in result.rows if r.status in ("refused", "failed")]
    if result.restoring:
        result.elimination = (f"{', '.join(result.restoring)} bring(s) {', '.join(spread)} back to one answer "
                              f"(of {len(tried)} controls that ran)")
    else:
        result.elimination = (f"no control of the {len(tried)} that ran brings {', '.join(spread)} back to one answer"
                              + (f"; refused or failed: {', '.join(refused)}" if refused else ""))


def format_controls_table(result: ControlsResult) -> Table:
    """configuration -> distinct answers and lengths (count), per prompt, as a rich table."""
    table = Table(title=Text(f"{result.arm} ({result.runtime}): gate per configuration, {result.n_requests} requests"))
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
                cells += [f"{row.distinct[pid]}/{row.answered.get(pid, 0)}", row.lengths.get(pid, "")]
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


STAGE = Stage(name="controls", result=ControlsResult, run=run, fresh_runtimes=True, in_bench=False,
              summary="the gate once per determinism control, each on a fresh runtime",
              inputs=lambda p: select_prompts(p.gate_prompts),
              planned=None)  # its rows depend on the runtime's controls: a count and a rate, no total

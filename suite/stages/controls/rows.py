"""The control matrix's rows as the record half knows them, none of it starting a runtime or sending
a request: the configurations a request names (`resolve_requested`), a row made from its gate
(`row_from_gate`) and pooled over its launches (`pool_launches`, `cold_odd_of`), the test adapter's
place and the request fields that pick it (`adapter_path`, `lora_request_fields`), and a matrix cut
short rebuilt from its request lines (`rebuild`, `carries_line`). `suite.stages.controls.run`
launches the rows and fills them with these."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.analysis.repro import Sample, group_answers
from suite.definitions import COMBINE
from suite.errors import SuiteError
from suite.gpu import Energy
from suite.stages.controls.elimination import eliminate
from suite.stages.controls.result import ControlMatrixResult, MatrixRow
from suite.stages.controls.settings import LORA
from suite.stages.gate.result import gate_of_lines
from suite.stages.gate_models import GateResult

if TYPE_CHECKING:
    from suite.catalog import ModelCard
    from suite.stages.base import StageContext


ADAPTER_NAME = "suite-test-lora"
# A control row stops a prompt's series once it has shown this many distinct answers.
CONTROL_STOP_AFTER_DISTINCT = 2


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


def gate_tokens(gate: GateResult | None) -> int:
    """Output tokens of every answer a gate counted (each distinct answer's length times its count)."""
    return sum((a.n_tokens or 0) * a.count for p in gate.prompts for a in p.answers) if gate else 0


def row_from_gate(row: MatrixRow, gate: GateResult) -> MatrixRow:
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


def unchanged_text(part: str, kernels: str, whose: str) -> str:
    """Why a kernel-part row tested nothing: its launch named the same kernels for its part as
    `whose` start-up did (the arm's, or the default row's)."""
    return (f"the switch did not change the {part} kernels: this launch's start-up named {kernels}, as "
            f"{whose} did, so the row tests nothing and is neither credited nor ruled out")


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


def pool_launches(row: MatrixRow, launches: list[MatrixRow]) -> None:
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


def lora_dir(card: ModelCard) -> Path:
    from suite.paths import models_dir

    return models_dir() / card.name / "lora"


def adapter_path(card: ModelCard, fmt_kind: str) -> Path:
    """Where the test adapter of this model lives, in the form a runtime of `fmt_kind` loads."""
    if fmt_kind == "gguf":
        return lora_dir(card) / "gguf" / "adapter.gguf"
    return lora_dir(card) / "peft"


def lora_request_fields(select: str, served_name: str, adapter: bool) -> dict[str, Any] | None:
    """The request fields that pick the base model or the adapter; None: no per-request choice."""
    if select == "model":
        return {"model": ADAPTER_NAME} if adapter else {"model": served_name}
    if select == "scale":
        return {"lora": [{"id": 0, "scale": 1.0 if adapter else 0.0}]}
    return None


def rebuild(lines: list[Any], before: Any, logs: Path | None = None) -> ControlMatrixResult | None:
    """The rows a control matrix finished before its run stopped (a time limit, a kill), rebuilt
    from the run's request lines, in the order they ran; `before` holds the stages the run finished
    (its gate: the prompts that varied, for the elimination); `logs` the run's log folder, where
    each row's launch left its start-up log: the kernels the row ran are read there
    (`annotate_rows`), so that a kernel-part row is named by its part, and one whose part did not
    change is reported so, as in a matrix that finished.

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
    rows: list[MatrixRow] = []
    cut: list[str] = []
    for label, qs in by_label.items():
        series: dict[str, list[Sample]] = {}
        for q in qs:
            series.setdefault(q.prompt_id, []).append(q.sample())
        stop = None if label == "default" else CONTROL_STOP_AFTER_DISTINCT
        finished = n > 0 and all(
            pid in series and (len(series[pid]) >= n or (stop is not None and len(group_answers(series[pid])) >= stop))
            for pid in prompts)
        if not finished:
            cut.append(f"{label} ({sum(len(v) for v in series.values())} requests)")
            continue
        gate_of_row = gate_of_lines(label, qs, prompts, n)
        controls, concurrency = gate_of_row.controls, gate_of_row.concurrency
        row = MatrixRow(configuration=label, controls=controls, status="ok", concurrency=concurrency,
                         ran_controls=controls)
        row = row_from_gate(row, gate_of_row)
        if label != "default" and n > 0:  # a row launched again sent each prompt's series once a launch
            row.launches = max(1, min(len(series[pid]) // n for pid in prompts))
        rows.append(row)
    if not rows:
        return None  # nothing finished: the page names the lines kept, and no more
    annotate_rows(rows, getattr(before, "runtime", "") or "", logs,
                  getattr(getattr(before, "signature", None), "kernel_path", None))
    result = ControlMatrixResult(runtime=getattr(before, "runtime", "") or "", arm=getattr(before, "arm", "") or "",
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


def row_log(logs: Path | None, label: str) -> Path | None:
    """The start-up log of a row's first launch in a run's log folder (`runtime-LABEL-MS.log`)."""
    if logs is None or not logs.is_dir():
        return None
    found = sorted((p for p in logs.iterdir() if re.fullmatch(rf"runtime-{re.escape(label)}-(\d+)\.log(\.xz)?", p.name)),
                   key=lambda p: int(re.findall(r"-(\d+)\.log", p.name)[-1]))
    return found[0] if found else None


def annotate_rows(rows: list[MatrixRow], runtime: str, logs: Path | None,
                  arm_path: dict[str, str] | None) -> None:
    """What a rebuilt row cannot read in request lines: its control's description, kernel part and
    source (from the runtime's definition, where it still names the control) and the kernels its
    launch ran (its own start-up log). A kernel-part row whose part's kernels equal the default
    row's (else the arm's) is marked `unchanged`: it tested nothing."""
    from suite.definitions import load_definitions
    from suite.probes import kernel_path

    try:
        definition = load_definitions().get(runtime)
    except SuiteError:
        definition = None
    for row in rows:
        try:
            control = definition.control(row.configuration) if definition is not None else None
        except SuiteError:  # the definition no longer names it
            control = None
        if control is not None and definition is not None and row.configuration != "default":
            row.description, row.part, row.source = (control.description, part_of(definition, row.configuration),
                                                     control.source)
        log_path = row_log(logs, row.configuration)
        if definition is not None and log_path is not None and log_path.suffix == ".log":
            row.kernel_path = kernel_path(log_path, definition.kernels)
    default = next((r for r in rows if r.configuration == "default"), None)
    before_path = (default.kernel_path if default is not None else None) or arm_path or {}
    for row in rows:
        if row.configuration == "default" or row.part is None or row.kernel_path is None:
            continue
        for part in row.part.split(COMBINE):
            before, after = before_path.get(part), row.kernel_path.get(part)
            if before is not None and after == before:
                row.status, row.reason = "unchanged", unchanged_text(part, after, "the default's")
                break


def part_of(runtime: Any, name: str) -> str | None:
    """The kernel part(s) a row changes, as the row records them: one part, or a combination's
    parts joined with `+` ("moe+linear"); None for a control of no kernel part."""
    parts = runtime.kernel_parts(name) if name != "default" else []
    return COMBINE.join(parts) or None


def carries_line(part: ControlMatrixResult, line: dict[str, Any]) -> bool:
    """Whether a resumed run keeps a request line of an earlier one: a finished row's (a row tried
    inside one launch labels its lines "NAME:with", "NAME:without" and "NAME:first")."""
    label = str(line.get("label"))
    if label in {r.configuration for r in part.rows}:
        return True
    name, _, side = label.rpartition(":")
    return side in ("with", "without", "first") and name in {r.configuration for r in part.rows if r.in_launch}

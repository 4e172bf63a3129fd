"""The control matrix's run: the configurations asked for (`resolve_requested`), each a row of its
own on a fresh runtime with the gate on it (`run_configuration`; launches of a short gate where the
gate's variance is a cold-start transient, `run_transient_row`), the controls that can be applied
per request tried first inside one launch (`run_in_launch_rows`), and LoRA's rows, base and
adapter, from one process started with the suite's test adapter (`run_lora`; `ensure_adapter`
makes it with `suite/recipes/make_lora.py` when missing; a request picks one or the other as the
runtime's `capabilities.lora_select` says: the model field (vLLM), a per-request `lora` scale list
(llama-server), or not at all, the adapter applying to the whole process (llama-cpp-python), which
the result says); `run` puts the matrix together and eliminates
(`suite.stages.controls.elimination`). The rows' pure parts (the configurations asked for, a
row from its gate, the adapter's place, and a run cut short taken up again from its request lines:
`rebuild`, `carries_line`) are `suite.stages.controls.rows`'. The run half of the package: its
`STAGE` names `run` here as "suite.stages.controls.run:run", imported only when a bench runs the
matrix."""

from __future__ import annotations

import logging
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.definitions import InLaunch
from suite.errors import EnvironmentUnavailable, RuntimeStartError
from suite.gpu import EnergyMeter
from suite.launchers.base import LoraAdapter
from suite.stages.base import StageContext
from suite.stages.controls.elimination import (
    TRANSIENT_LAUNCHES,
    TRANSIENT_REQUESTS,
    combinations_to_try,
    eliminate,
    launches_for,
)
from suite.stages.controls.inlaunch import run_controls
from suite.stages.controls.result import ControlMatrixResult, LoraOutcome, MatrixRow
from suite.stages.controls.rows import (
    ADAPTER_NAME,
    CONTROL_STOP_AFTER_DISTINCT,
    adapter_path,
    cold_odd_of,
    gate_tokens,
    lora_dir,
    lora_request_fields,
    part_of,
    pool_launches,
    resolve_requested,
    row_from_gate,
    transient_prompts,
    unchanged_text,
)
from suite.stages.controls.settings import LORA, ControlMatrixSettings, settings
from suite.stages.gate_models import GateResult, select_prompts
from suite.stages.repeat import concurrency_of, death_reason_of, logprobs_for, run_gate

if TYPE_CHECKING:
    from suite.catalog import ModelCard

log = logging.getLogger(__name__)


# -- configurations -------------------------------------------------------------------------------


def _ran_with(row: MatrixRow, running: Any) -> None:
    """Copy what the launch actually ran with onto the row."""
    row.command = list(running.command)
    row.ran_controls = list(getattr(running, "launch_controls", None) or [])
    row.env = dict(getattr(running, "launch_env", None) or {})
    row.args = list(getattr(running, "launch_args", None) or [])


def _with_energy(row: MatrixRow, meter: EnergyMeter) -> MatrixRow:
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
                      requests: int | None = None) -> MatrixRow:
    """One row: a fresh runtime with the control, the gate on it (`prompts`: only these), stopped.

    A control row stops a prompt at its second answer; the default row, the comparison, runs in full.
    `requests`: a short gate of this many requests per prompt, in full (a launch of a transient row).
    """
    control = ctx.runtime.control(name)
    controls = [] if name == "default" else [name]
    row = MatrixRow(configuration=name, controls=controls, description=control.description,
                     status="ok", concurrency=control.concurrency, source=control.source,
                     part=part_of(ctx.runtime, name))
    try:
        with ctx.launch(controls=controls, inherit=False) as (running, client):
            row.startup_s = running.startup_s
            _ran_with(row, running)
            row.kernel_path = row_kernels(ctx, running)
            same = unchanged_part(ctx, name, row.kernel_path)
            if same is not None:
                row.status, row.reason = "unchanged", same
                log.warning("%s control %s: %s", ctx.runtime.name, name, same)
                return row
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


def row_kernels(ctx: StageContext, running: Any) -> dict[str, str] | None:
    """The kernels this launch ran, as its own start-up log names them (None: no log here, or the
    definition names no kernel lines)."""
    from suite.probes import kernel_path

    log_path = getattr(running, "log_path", None)
    return kernel_path(log_path, ctx.runtime.kernels) if log_path is not None else None


def unchanged_part(ctx: StageContext, name: str, path: dict[str, str] | None) -> str | None:
    """Why a kernel-part control's row changed nothing: its start-up named the same kernels for its
    part as the arm's own start-up did. None where the part changed, or the control is of no part."""
    if name == "default" or path is None:
        return None
    arm = getattr(getattr(ctx, "signature", None), "kernel_path", None) or {}
    for part in ctx.runtime.kernel_parts(name):  # a combination: every part must have changed
        before, after = arm.get(part), path.get(part)
        if before is not None and after == before:
            return unchanged_text(part, before, "the arm's own")
    return None


def one_answer_each(row: MatrixRow, prompts: list[str] | None) -> bool:
    """Whether a launch row answered every prompt it ran and gave one answer on each."""
    pids = [pid for pid in row.answered if prompts is None or pid in prompts]
    return bool(pids) and all(row.answered[pid] > 0 and row.distinct.get(pid, 0) <= 1 for pid in pids)


def add_launch(row: MatrixRow, again: MatrixRow) -> MatrixRow:
    """A further launch of a row: its answers pooled with the row's (distinct over every launch,
    the modal answer's count over every launch), its tokens/s and energy over every launch's gate."""
    if again.status != "ok" or again.gate is None:
        row.status, row.reason = again.status, f"launch {row.launches + 1}: {again.reason}"
        return row
    if again.kernel_path != row.kernel_path:
        row.reason = (f"launch {row.launches + 1} named other kernels: {again.kernel_path} "
                      f"(launch 1: {row.kernel_path})")
    row.more_gates.append(again.gate)
    row.launches += 1
    gates = [g for g in [row.gate, *row.more_gates] if g is not None]
    for pid in list(row.answered):
        counts: dict[Any, int] = {}
        for g in gates:
            for p in g.prompts:
                if p.prompt_id != pid:
                    continue
                for a in p.answers:
                    key = tuple(a.token_ids) if a.token_ids is not None else a.text
                    counts[key] = counts.get(key, 0) + a.count
        row.answered[pid] = sum(counts.values())
        row.distinct[pid] = len(counts)
        row.modal_count[pid] = max(counts.values(), default=0)
        row.sent[pid] = sum(p.requests for g in gates for p in g.prompts if p.prompt_id == pid)
    pool_launches(row, [row, again])
    return row


def run_transient_row(ctx: StageContext, name: str, prompts: list[str],
                      launches: int = TRANSIENT_LAUNCHES) -> MatrixRow:
    """A row of `launches` launches (`launches_for` the matrix's controls), each a short gate of
    TRANSIENT_REQUESTS requests per prompt: whether each launch's first answer alone differs, the
    unit a transient is tested in."""
    first: MatrixRow | None = None
    ran: list[MatrixRow] = []
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


# -- LoRA -----------------------------------------------------------------------------------------


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


def run_lora(ctx: StageContext) -> tuple[list[MatrixRow], LoraOutcome]:
    caps = ctx.runtime.capabilities
    outcome = LoraOutcome(offered=caps.lora, select=caps.lora_select)
    rows: list[MatrixRow] = []
    if not caps.lora:
        return rows, outcome
    fmt_kind = ctx.card.formats[ctx.arm.format].kind
    try:
        path = ensure_adapter(ctx.card, fmt_kind)
    except EnvironmentUnavailable as exc:
        outcome.status, outcome.reason = "skipped", str(exc)
        return [MatrixRow(configuration="lora", controls=[LORA], status="skipped", reason=str(exc))], outcome
    outcome.adapter = str(path)
    same_process = caps.lora_select != "process"
    outcome.same_process = same_process
    labels = ["lora:base", "lora:adapter"] if same_process else ["lora:adapter (whole process)"]
    try:
        with ctx.launch(controls=[], inherit=False, lora=[LoraAdapter(ADAPTER_NAME, path)]) as (running, client):
            for n_label, label in enumerate(labels):
                is_adapter = "adapter" in label
                row = MatrixRow(configuration=label, controls=[LORA], status="ok",
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
        return [MatrixRow(configuration="lora", controls=[LORA], status="refused", reason=outcome.reason)], outcome
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


def _modal_texts(row: MatrixRow | None) -> dict[str, str]:
    if row is None or row.gate is None:
        return {}
    return {p.prompt_id: p.answers[0].text for p in row.gate.prompts if p.answers}


# -- the stage ------------------------------------------------------------------------------------

def run(ctx: StageContext) -> ControlMatrixResult:
    from suite.stages.controls import STAGE  # the package's record (it names `run` here)

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
    chosen = (own(ControlMatrixSettings) if own is not None else None) or settings(ctx.profile)
    in_launch = [n for n in names if n not in ("default", LORA) and chosen.in_launch
                 and ctx.runtime.control(n).per_request() is not None
                 and (not ctx.runtime.control(n).per_request().reset_cache  # type: ignore[union-attr]
                      or ctx.runtime.server.reset_cache_path)]
    result = ControlMatrixResult(runtime=ctx.runtime.name, arm=ctx.arm_name, requested=list(requested or ["all"]),
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
            result.rows.append(MatrixRow(
                configuration=name, controls=[name], description=ctx.runtime.control(name).description,
                status="skipped", reason=(f"not started: {', '.join(credited)} already brings every prompt back "
                                          f"inside one launch; `--controls {name}` tries it")))
        names = []
    # An in-launch row that could not decide (its pairs compared too little: the default's odd answers
    # rare in that launch, or absent from it) is tried over launches too, as a row of its own.
    undecided = [n for n in in_launch if n not in carried and not _decided_in_launch(result, n, prompts)]
    if names and not (automatic and in_launch and _settled_in_launch(result, prompts)):
        names = [*names, *(f"{n}{OVER_LAUNCHES}" for n in undecided)]
    if automatic and in_launch and not any(n not in in_launch and n not in ("default", LORA) for n in names):
        names = [n for n in names if n != "default"]  # no launch row to compare with a default one
    _run_rows(ctx, result, names, in_launch, carried, taken_up, transient, prompts, per_row, only)
    eliminate(result, ctx.results.get("gate"))
    # no single kernel part restores one answer: the smallest combinations of the parts that moved it
    combos = combinations_to_try(result) if chosen.combinations and not transient else []
    if combos:
        log.info("controls %s: no single kernel part restores one answer; trying together: %s",
                 ctx.arm_name, ", ".join(combos))
        _run_rows(ctx, result, combos, [], carried, taken_up, transient, prompts, per_row, only)
        eliminate(result, ctx.results.get("gate"))
    if taken_up:
        result.interrupted = (f"resumed: {', '.join(taken_up)} finished before the run was interrupted and "
                              "were rebuilt from their request lines (no start-up time or energy for them)")
    log.debug("controls %s: %s", ctx.arm_name, result.elimination)
    return result


def _run_rows(ctx: StageContext, result: ControlMatrixResult, names: list[str], in_launch: list[str],
              carried: dict[str, MatrixRow], taken_up: list[str], transient: list[str] | None, prompts: list[str],
              per_row: int, only: list[str] | None) -> None:
    """The matrix's launch rows, one after another, appended to `result` (a resumed run's finished
    rows taken up from `carried`)."""
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
            row = run_transient_row(ctx, name.removesuffix(OVER_LAUNCHES), prompts, per_row)
            row.configuration = name
            result.rows.append(row)
        else:
            control = name.removesuffix(OVER_LAUNCHES)
            row = run_configuration(ctx, control, prompts=only)
            if control != "default" and row.status == "ok" and one_answer_each(row, only):
                # one answer in its launch: a second launch, so that a credit never rests on one
                row = add_launch(row, run_configuration(ctx, control, prompts=only))
            if name != control:
                row.configuration = name
                row.why = "its pairs inside one launch could not decide: tried over launches of its own"
            result.rows.append(row)
        log.info("controls %s: %s done in %.0f s", ctx.arm_name, name, time.monotonic() - t0)


def run_in_launch_rows(ctx: StageContext, names: list[str], prompts: list[str], level: float,
                       chosen: ControlMatrixSettings) -> list[MatrixRow]:
    """One row per per-request control, all from one launch of the arm's own configuration."""
    gate_prompts = [p for p in select_prompts(ctx.profile.gate_prompts) if p.id in prompts]
    rows = {n: MatrixRow(configuration=n, controls=[n], description=ctx.runtime.control(n).description,
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
        if run.died is not None or (failed is not None and not any(s.outcomes for s in run.series.values())):
            # the runtime died during the pairs (or no pair ran): the row failed, with the runtime's
            # own error, whatever pairs came before
            row.status, row.reason = "failed", run.died or (failed.reason if failed else None)
    return list(rows.values())


# The name of a per-request control's row of its own launches, where its pairs could not decide.
OVER_LAUNCHES = " over launches"


def _decided_in_launch(result: ControlMatrixResult, name: str, prompts: list[str]) -> bool:
    """Whether a control's pairs inside one launch decided on every prompt: credited, an effect of
    the stated size ruled out, or a second answer with it (it cannot be credited)."""
    row = next((r for r in result.rows if r.configuration == name and r.in_launch), None)
    if row is None or row.status != "ok":
        return True  # refused or failed: a launch of its own would fail the same way
    return all(pid in row.in_launch and row.in_launch[pid].stop in ("credit", "rule-out", "second-answer")
               for pid in prompts)


def _settled_in_launch(result: ControlMatrixResult, prompts: list[str]) -> bool:
    """Whether one in-launch row crossed its credit boundary on every prompt that varied."""
    return any(r.in_launch and all(pid in r.in_launch and r.in_launch[pid].stop == "credit" for pid in prompts)
               for r in result.rows)

"""The control matrix as it is shown: its section of a model page and of a run's page (`page`, which
`section.html` draws: one row per configuration, distinct answers per gate prompt, each row against
the default row in one line, `control_row_line`), the table the command line prints
(`format_controls_table`) and `suite export`'s controls table (`export_rows`, its columns in
`COLUMNS`)."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from suite.signature import kernel_phrase
from suite.stages.base import ColumnType, PageInputs, length_lists
from suite.stages.controls.elimination import launch_counts
from suite.stages.controls.elimination import same_mix as proportional_mix
from suite.stages.controls.result import ControlMatrixResult, MatrixRow
from suite.stages.gate_models import truncation_by_prompt


def control_row_line(row: dict[str, Any]) -> str:
    """`batch-invariant: 1 distinct of 200, 0.74x the tokens/s, 1.30x the J/token`: one row of the
    control matrix against the default row, in one line (a ratio only where both figures exist)."""
    cells = [c for c in row["cells"] if c is not None]
    if row["status"] != "ok" or not cells:
        return f"{row['configuration']}: {row['status']}" + (f" ({row['reason']})" if row.get("reason") else "")
    distinct = "; ".join(f"{c['distinct']} distinct of {c['answered']}"
                         + (f" (first answer alone different in {c['cold_odd'][0]} of {c['cold_odd'][1]} "
                            f"launch{'es' if c['cold_odd'][1] != 1 else ''})"
                            if c.get("cold_odd") else "") for c in cells)
    parts = [distinct]
    if row.get("unit") == "pair":
        parts.append("in one launch, pairs with and without it: " + "; ".join(
            f"{c['pairs']['pairs']} pairs, {c['pairs']['stop']}" for c in cells if c.get("pairs")))
    if row["configuration"] != "default":
        if row.get("cost") is not None:
            parts.append(f"{row['cost']:.2f}x the tokens/s")
        if row.get("energy_cost") is not None:
            parts.append(f"{row['energy_cost']:.2f}x the J/token")
    elif row.get("j_per_token") is not None:
        parts.append(f"{row['j_per_token']:.3g} J/token")
    return f"{row['configuration']}: " + ", ".join(parts)


def _pairs(r: Any, pid: str) -> dict[str, Any] | None:
    series = r.in_launch.get(pid)
    if series is None:
        return None
    res = series.result()
    return {"pairs": len(series.outcomes), "favourable": res.favourable, "against": res.against,
            "concordant": res.concordant, "stop": series.stop, "p": res.p_value, "level": series.level}


def _per_launch(r: MatrixRow, pid: str) -> dict[str, int] | None:
    """A row of several launches on one prompt: its launches, the answers other than their own
    launch's modal one, and how many different answers the launches' modal answers were."""
    counts = launch_counts(r, pid)
    if len(counts) < 2:
        return None
    return {"launches": len(counts), "inside": sum(c.answered - c.modal_count for c in counts),
            "apart": len({c.modal for c in counts})}


def controls_view(c: ControlMatrixResult | None, prompt_ids: list[str]) -> dict[str, Any] | None:
    """The control matrix: one row per configuration, distinct answers per gate prompt."""
    if c is None:
        return None
    prompts = list(c.prompts) or prompt_ids
    rows: list[dict[str, Any]] = []
    for r in c.rows:
        cut = truncation_by_prompt(r.gate)
        failed = {gp.prompt_id: gp for gp in (r.gate.prompts if r.gate else [])}
        cells = [None if pid not in r.distinct else {
            "errors": failed[pid].errors if pid in failed else 0,
            "error": failed[pid].error_messages[0] if pid in failed and failed[pid].error_messages else None,
            "requests": failed[pid].requests if pid in failed else None,
            "distinct": r.distinct[pid], "answered": r.answered.get(pid), "lengths": r.lengths.get(pid),
            "truncated": cut.get(pid, (None, None))[0], "max_tokens": cut.get(pid, (None, None))[1],
            # a transient's row: launches whose first answer alone differed, of the launches run
            "cold_odd": (sum(1 for x in r.cold_odd[pid] if x), len(r.cold_odd[pid])) if pid in r.cold_odd else None,
            # a row tried inside one launch: its pairs, how they fell and how the series stopped
            "pairs": _pairs(r, pid),
            # a row of several launches: how many launches, and how many different answers their
            # modal answers were where each launch gave one answer (launches apart, not requests)
            "per_launch": _per_launch(r, pid)}
            for pid in prompts]
        rows.append({
            "configuration": r.configuration, "description": r.description, "status": r.status,
            "reason": r.reason, "concurrency": r.concurrency, "startup_s": r.startup_s,
            "reproducible": r.reproducible, "cells": cells, "ran_controls": r.ran_controls,
            "env": r.env, "args": r.args, "tokens_per_s": r.tokens_per_s,
            "j_per_token": r.energy.j_per_token if r.energy else None,
            "energy_j": r.energy.joules if r.energy else None,
            "mean_power_w": r.energy.mean_power_w if r.energy else None, "sent": dict(r.sent),
            "unit": r.unit, "why": r.why, "paired_tokens_per_s": r.paired_tokens_per_s,
            "launches": r.launches, "kernel_path": dict(r.kernel_path or {}), "source": r.source,
        })
    default = next((row for row in rows if row["configuration"] == "default"), None)
    default_tps = default["tokens_per_s"] if default else None
    default_jpt = default["j_per_token"] if default else None
    for row in rows:
        tps, jpt = row["tokens_per_s"], row["j_per_token"]
        # a ratio only over the same requests per prompt: a row that stopped a prompt at its second
        # answer has another mix of prompts (a long document weighs less), so its speed is not the
        # default's to compare with
        same_mix = default is not None and proportional_mix(row["sent"], default["sent"])
        row["cost"] = tps / default_tps if same_mix and tps is not None and default_tps else None
        row["energy_cost"] = jpt / default_jpt if same_mix and jpt is not None and default_jpt else None
        if row["unit"] == "pair":  # against the requests without it, in the same launch
            paired = row["paired_tokens_per_s"]
            row["cost"] = tps / paired if tps is not None and paired else None
            row["energy_cost"] = None
        row["line"] = control_row_line(row)
    return {"prompts": prompts, "rows": rows, "n": c.n_requests, "launches": c.launches_per_row,
            "elimination": c.elimination, "interrupted": c.interrupted,
            "automatic": c.automatic, "restoring": c.restoring, "restores_word": c.restores_word,
            "spread_prompts": c.spread_prompts, "family": c.family,
            "by_conf": {row["configuration"]: row for row in rows}, "lora": c.lora}


def page(results: list[ControlMatrixResult | None], inputs: PageInputs) -> dict[str, Any]:
    """The section's variables: each arm's matrix and every configuration any arm ran, in order."""
    controls = [controls_view(c, inputs.prompt_ids) for c in results]
    configs = list(dict.fromkeys(row["configuration"] for c in controls for row in (c or {}).get("rows", [])))
    return {"controls": controls, "control_configs": configs}


def format_controls_table(result: ControlMatrixResult) -> Table:
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


def export_rows(result: ControlMatrixResult) -> list[dict[str, Any]]:
    """`suite export`'s controls table: one row per control configuration and gate prompt."""
    rows: list[dict[str, Any]] = []
    for row in result.rows:
        e = row.energy
        base = {"configuration": row.configuration, "status": row.status, "reason": row.reason,
                "concurrency": row.concurrency, "startup_s": row.startup_s,
                "controls": list(row.ran_controls),
                "tokens_per_s": row.tokens_per_s, "energy_j": e.joules if e else None,
                "j_per_token": e.j_per_token if e else None,
                "mean_power_w": e.mean_power_w if e else None, "launches": row.launches,
                "kernels": kernel_phrase(row.kernel_path)}
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


COLUMNS: dict[str, ColumnType] = {
    "configuration": "str", "status": "str", "reason": "str", "concurrency": "int", "startup_s": "float",
    "controls": "list[str]", "tokens_per_s": "float", "energy_j": "float", "j_per_token": "float",
    "mean_power_w": "float", "prompt_id": "str", "distinct_answers": "int", "answered": "int",
    "answer_lengths_tokens": "list[int]", "answer_length_counts": "list[int]", "truncated": "int", "max_tokens": "int",
    # the row's unit (request, launch, pair) and, for a row tried inside one launch, its pairs per prompt
    "unit": "str", "pairs": "int", "pairs_differ": "int", "pairs_other_way": "int", "pairs_alike": "int",
    "sequential_stop": "str", "sequential_p": "float", "sequential_level": "float",
    # the launches the row ran and the kernels its own start-up named
    "launches": "int", "kernels": "str"}

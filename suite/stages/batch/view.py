"""The batch-composition stage's part of a model page: per mode, the target's distinct answers
with n, departures from its one-at-a-time answer, and each arm's tokens/s and J/token against the
first arm's that ran it."""

from __future__ import annotations

from typing import Any

from suite.gpu import ratio_text
from suite.stages.base import PageInputs
from suite.stages.batch.result import BatchResult, gap_text


def batch_view(b: BatchResult | None) -> dict[str, Any] | None:
    """The batch-composition stage: per mode, the target's distinct answers with n, departures
    from its one-at-a-time answer, the first one's token and logprob gap, tokens/s and J/token."""
    if b is None:
        return None
    single = b.mode("single")
    base_tps = single.tokens_per_s if single else None
    modes = []
    for m in b.modes:
        d = m.first_divergence
        modes.append({
            "mode": m.mode, "trials": m.trials, "sizes": sorted(set(m.batch_sizes)), "distinct": m.target.distinct_answers,
            "answered": m.target.answered, "failed": m.failed, "requests": m.requests,
            "differ": m.differ_from_single, "same": m.same_as_single,
            "first": gap_text(d) if d is not None and m.differ_from_single else None,
            "context": (d.modal_context, d.other_context) if d is not None and m.differ_from_single else None,
            "drift": m.same_tokens_logprob_diff, "tokens_per_s": m.tokens_per_s, "j_per_token": m.j_per_token,
            "prefix_chars": m.prefix_chars, "pattern": m.target.pattern_text, "against": None,
        })
    return {"prompt_id": b.prompt_id, "max_tokens": b.max_tokens, "trials": b.trials, "verdict": b.verdict,
            "varies": b.varies_with_batch, "modes": modes, "by_mode": {x["mode"]: x for x in modes},
            "cache_reset": b.cache_reset, "cache_reset_note": b.cache_reset_note, "cache_reset_path": b.cache_reset_path,
            "reference_tied": b.reference_tied, "distinct_overall": b.distinct_overall,
            "answered_overall": b.answered_overall, "stopped": b.stopped_reason, "base_tps": base_tps,
            "j_per_token": b.j_per_token}


def batch_ratios(views: list[dict[str, Any] | None], arms: list[str]) -> None:
    """Each arm's batch modes against the first arm's that ran the stage: `0.74x the tokens/s,
    1.30x the J/token of vllm-gpu` (default mode against batch-invariant mode, on one page)."""
    base_i = next((i for i, v in enumerate(views) if v), None)
    if base_i is None:
        return
    base = views[base_i]
    assert base is not None
    for v in views[base_i + 1:]:
        if not v:
            continue
        for x in v["modes"]:
            b = base["by_mode"].get(x["mode"])
            parts = [t for t in (ratio_text(x["tokens_per_s"], b and b["tokens_per_s"], "tokens/s"),
                                 ratio_text(x["j_per_token"], b and b["j_per_token"], "J/token")) if t]
            x["against"] = f"{', '.join(parts)} of {arms[base_i]}" if parts else None


def page(results: list[BatchResult | None], inputs: PageInputs) -> dict[str, Any]:
    """The section's variables: each arm's view, with its ratios to the first arm's."""
    batch = [batch_view(b) for b in results]
    batch_ratios(batch, inputs.arms)
    return {"batch": batch}

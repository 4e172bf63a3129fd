"""The restarts stage's part of a model page: within-launch stability and across-launch
consistency per arm, with the agreement's 95% interval, and the kept-caches pass beside it."""

from __future__ import annotations

from typing import Any

from suite.stages.base import PageInputs
from suite.stages.restarts.result import RestartsResult


def restarts_view(r: RestartsResult | None) -> dict[str, Any] | None:
    """Within-launch stability and across-launch consistency, with the agreement's 95% interval."""
    if r is None:
        return None
    prompts = [{
        "prompt_id": p.prompt_id, "within": p.within_distinct, "across": p.across_distinct,
        "agreement": p.agreement, "ci": p.agreement_ci95, "lengths": p.lengths_text, "errors": p.errors,
        "ci_note": p.ci_note, "pairs": p.pairs, "logprob_diff": p.across_logprob_diff,
        "logprobs_apart": p.same_tokens_logprobs_apart,
        "truncated": p.truncated, "answered": p.answered or sum(x.answered for x in p.per_launch),
        "max_tokens": _max_tokens_of(r, p.prompt_id),
    } for p in r.prompts]
    outcomes = [{"index": o.index, "status": o.status, "reason": o.reason, "startup_s": o.startup_s,
                 "cache_files_before": o.cache_files_before, "cache_files": o.cache_files,
                 "cache_settings": o.cache_settings} for o in r.launch_outcomes]
    return {
        "launches": r.launches, "launched": r.launched, "per_launch": r.requests_per_launch,
        "stable_within": r.stable_within, "consistent_across": r.consistent_across, "verdict": r.verdict,
        "within_verdict": r.within_verdict, "across_verdict": r.across_verdict,
        "prompts": prompts, "outcomes": outcomes, "by_prompt": {p["prompt_id"]: p for p in prompts},
        "startup": [o.startup_s for o in r.launch_outcomes if o.startup_s is not None],
        "cache_mode": r.cache_mode, "kept": restarts_view(r.with_kept_caches),
        "caches_text": r.caches_text, "controls": r.controls, "interrupted": r.interrupted,
        "cache_counts": [o.cache_files_before for o in r.launch_outcomes],
        "cache_settings": next((o.cache_settings for o in r.launch_outcomes if o.cache_settings), {}),
    }


def _max_tokens_of(r: RestartsResult, prompt_id: str) -> int | None:
    """The token cap a launch's gate gave this prompt (the same in every launch)."""
    return next((p.max_tokens for o in r.launch_outcomes if o.gate is not None for p in o.gate.prompts
                 if p.prompt_id == prompt_id), None)


def page(results: list[RestartsResult | None], inputs: PageInputs) -> dict[str, Any]:
    """The section's variables: each arm's view and every prompt any arm's launches answered."""
    restarts = [restarts_view(r) for r in results]
    prompts = list(dict.fromkeys(p["prompt_id"] for rs in restarts for p in (rs or {}).get("prompts", [])))
    return {"restarts": restarts, "restart_prompts": prompts}

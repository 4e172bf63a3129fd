"""The gate stage's part of a page: how the gate sent its requests, as the records say.

The per-prompt figures (distinct answers, lengths, patterns, the link to each prompt's answers
page) reach the template as the page's `gate` (one mapping of prompt id to its view per arm, in
the page's column order) and `prompt_ids`: the site builds them, since it also rebuilds a gate
that never finished from its request lines and writes the answers pages they link to."""

from __future__ import annotations

from typing import Any

from suite.stages.base import PageInputs
from suite.stages.gate_models import GateResult


def gate_settings_text(gates: list[GateResult | None], arms: list[str] | None = None) -> str | None:
    """How the gate sent its requests, from the records: `one request at a time, temperature 0, seed 42`.

    One phrase where every run's gate had the same settings, else one per arm; None without a gate.
    """
    def phrase(g: GateResult) -> str:
        at_once = "one request at a time" if g.concurrency == 1 else f"{g.concurrency} requests at once"
        seed = "no seed" if g.seed is None else f"seed {g.seed}"
        return f"{at_once}, temperature {g.temperature:g}, {seed}"

    named = [(arm, phrase(g)) for arm, g in zip(arms or [""] * len(gates), gates, strict=True) if g is not None]
    if not named:
        return None
    if len({p for _, p in named}) == 1:
        return named[0][1]
    return "; ".join(f"{arm}: {p}" if arm else p for arm, p in named)


def page(results: list[GateResult | None], inputs: PageInputs) -> dict[str, Any]:
    """The section's variables: the gate's settings over the page's arms."""
    return {"gate_settings": gate_settings_text(results, inputs.arms)}

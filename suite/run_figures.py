"""A run's headline figures as other tools read them: `suite results --json` and `bench --json`.

Latency percentiles in milliseconds (TTFT, inter-token latency, time per output token, end to end)
and output tokens per second, from the level the pages show (one request at a time, else the
first), and joules per output token where an NVIDIA GPU's energy counter answered; and the run's
claims (suite.claims), computed from its record when the JSON is made, as the pages are.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from suite.analysis.claims import Claim, Recomputed


class Percentiles(BaseModel):
    """One measured quantity's percentiles over `n` requests (None where there were none)."""

    n: int
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    mean: float | None = None


class LatencyFigures(BaseModel):
    """The latency stage's figures at one concurrency level; times in milliseconds."""

    concurrency: int = Field(description="requests in flight at once at the level these come from")
    ttft_ms: Percentiles = Field(description="time to first token, ms")
    itl_ms: Percentiles = Field(description="inter-token latency (gaps between streamed chunks), ms")
    tpot_ms: Percentiles = Field(description="time per output token after the first, ms")
    e2e_ms: Percentiles = Field(description="end-to-end request latency, ms")
    output_tokens_per_s: Percentiles = Field(description="output tokens per second, per request")


class RunFigures(BaseModel):
    """What `--json` adds to a run's row: its latency, throughput and energy figures, and its verdicts."""

    latency: LatencyFigures | None = Field(default=None, description="None: the run has no latency result")
    j_per_token: float | None = Field(default=None, description="joules per output token (NVIDIA GPUs only)")
    # The run's claims, stage by stage (what its first screen renders): each verdict with its counts,
    # test, n, p and family-corrected p, interval or bound, caveats and cost.
    claims: list[Claim] = Field(default_factory=list)
    # Verdicts the run printed otherwise when it ended (today's statistics read its answers otherwise).
    recomputed: list[Recomputed] = Field(default_factory=list)


def _percentiles(dist: Any, scale: float = 1.0) -> Percentiles:
    def scaled(v: float | None) -> float | None:
        return None if v is None else v * scale

    return Percentiles(n=dist.n, p50=scaled(dist.p50), p90=scaled(dist.p90), p99=scaled(dist.p99),
                       mean=scaled(dist.mean))


def j_per_token(summary: Any) -> float | None:
    """The run's joules per output token: its latency stage's where it has one (the suite's own
    throughput measurement), else over every stage with an energy figure; None without one."""
    from suite.stages import LATENCY_STAGE

    energy = getattr(summary, "energy", None) or {}
    if LATENCY_STAGE in energy and energy[LATENCY_STAGE].j_per_token is not None:
        return energy[LATENCY_STAGE].j_per_token
    joules = sum(e.joules for e in energy.values() if e.output_tokens)
    tokens = sum(e.output_tokens or 0 for e in energy.values())
    return round(joules / tokens, 6) if tokens else None


def run_figures(summary: Any) -> RunFigures:
    """A run summary's figures for `--json`."""
    from suite.stages import LATENCY_STAGE
    from suite.stages.latency.view import latency_level

    level = latency_level(getattr(summary, LATENCY_STAGE, None))
    latency = None if level is None else LatencyFigures(
        concurrency=level.concurrency, ttft_ms=_percentiles(level.ttft_s, 1000), itl_ms=_percentiles(level.itl_s, 1000),
        tpot_ms=_percentiles(level.tpot_s, 1000), e2e_ms=_percentiles(level.e2e_s, 1000),
        output_tokens_per_s=_percentiles(level.output_tokens_per_s))
    from suite.claims import claims_of

    return RunFigures(latency=latency, j_per_token=j_per_token(summary), claims=claims_of(summary),
                      recomputed=list(getattr(summary, "recomputed", []) or []))

"""The watchdog's record of one run: what was watched, the memory timeline, and any trip.

``WatchdogReport`` is what goes into ``summary.json["watchdog"]`` (``report.model_dump(mode="json")``).
Times named ``*_s`` without a date are seconds since the watchdog started; ``*_unix`` are wall-clock
epochs (comparable with timestamps that other processes write).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from memwatch.policy import Policy

SCHEMA_VERSION: Literal[1] = 1


class ProbeStatus(BaseModel):
    """One probe: could it run here, and if not, why."""

    name: str
    available: bool
    reason: str | None = None
    metrics: list[str] = Field(default_factory=list)
    errors: int = 0
    first_error: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class TripEvent(BaseModel):
    """The crossing that stopped the runtime, and how fast it was stopped."""

    probe: str
    metric: str
    rule: Literal["spill", "host_max", "device_max", "device_growth"]
    threshold_bytes: float  # the absolute limit crossed (baseline + allowance for relative rules)
    baseline_bytes: float | None = None
    value_bytes: float
    t_s: float  # when the sample that crossed was read
    previous_sample_t_s: float | None = None  # last sample below the limit: the crossing lies between
    detected_unix: float
    stop_called_s: float  # from detection to calling stop()
    stop_returned_s: float | None = None  # from detection to stop() returning
    stop_error: str | None = None
    gone_s: float | None = None  # from detection to the runtime's processes being gone
    gone_unix: float | None = None
    gone_basis: str | None = None  # "processes exited" or "stop returned" (pids unknown)
    crossing_to_gone_s: float | None = None  # upper bound: from the last sample below to gone


class Timeline(BaseModel):
    """Sampled values, columnar: ``metrics[name][k]`` was read at ``t_s[k]`` (None: not read).

    Long runs are reduced to at most ``max_points`` points; each point then holds the largest
    value of its span, so peaks survive.
    """

    t_s: list[float] = Field(default_factory=list)
    metrics: dict[str, list[float | None]] = Field(default_factory=dict)
    aggregation: Literal["none", "max"] = "none"
    raw_samples: int = 0
    max_points: int = 600


class WatchdogReport(BaseModel):
    """What the watchdog saw during one run."""

    schema_version: Literal[1] = SCHEMA_VERSION
    policy: Policy
    probes: list[ProbeStatus]
    tripped: bool = False
    trip: TripEvent | None = None
    started_unix: float
    duration_s: float
    sample_count: int
    mean_interval_s: float | None = None
    late_samples: int = 0  # samples that started more than one interval late
    baselines: dict[str, float] = Field(default_factory=dict)
    peaks: dict[str, float] = Field(default_factory=dict)
    rebaselined_at_s: list[float] = Field(default_factory=list)
    cpu_s: float  # the sampling thread's own CPU time
    cpu_pct_of_core: float  # cpu_s per wall second, in percent of one core
    cpu_ms_per_sample: float | None = None
    timeline: Timeline
    trip_window: Timeline | None = None  # full-resolution samples around the trip

    def summary_line(self) -> str:
        if self.trip is not None:
            t = self.trip
            gone = f", gone {t.gone_s:.3f} s after detection" if t.gone_s is not None else ""
            return (
                f"tripped: {t.probe}.{t.metric} = {t.value_bytes / 2**30:.2f} GiB > "
                f"{t.threshold_bytes / 2**30:.2f} GiB ({t.rule}) at {t.t_s:.2f} s{gone}"
            )
        return f"not tripped: {self.sample_count} samples over {self.duration_s:.1f} s"

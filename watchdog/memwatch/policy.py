"""The watchdog's policy: which memory readings stop a runtime, and when.

A probe tags each of its metrics with roles:

- ``spill``: memory that grows when a runtime overflows its device (the Windows "shared GPU
  memory" counter; on Linux the host memory of the runtime's process tree or container). It trips
  when it rises more than ``spill_gb`` above the runtime's baseline (its first samples' value).
- ``host``: host memory of the runtime; trips above the ceiling ``host_max_gb``.
- ``device``: device memory in use on one GPU; trips above the ceiling ``device_max_gb``, or when it
  rises more than ``device_growth_gb`` above its baseline.

Sizes named ``*_gb`` are in GiB (2**30 bytes), the unit nvidia-smi and the Windows task manager
show; the report also carries every threshold in bytes.
"""

from __future__ import annotations

import logging
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger(__name__)

GIB = float(1 << 30)

Role = Literal["spill", "host", "device"]
Rule = Literal["spill", "host_max", "device_max", "device_growth"]


class Policy(BaseModel):
    """Thresholds and sampling rate of one watched run. ``None`` switches a threshold off."""

    model_config = ConfigDict(extra="forbid")

    spill_gb: float | None = Field(1.5, gt=0, description="spilled/shared memory above baseline, GiB")
    device_max_gb: float | None = Field(None, gt=0, description="device memory ceiling per GPU, GiB")
    device_growth_gb: float | None = Field(None, gt=0, description="device memory above baseline, GiB")
    host_max_gb: float | None = Field(None, gt=0, description="host memory ceiling of the runtime, GiB")
    interval_s: float = Field(0.1, gt=0, le=1.0, description="seconds between samples (0.1 = 10 Hz)")
    baseline_samples: int = Field(1, ge=1, description="the baseline is the lowest of the first N samples")
    gone_timeout_s: float = Field(10.0, gt=0, description="how long to wait for the runtime to be gone")

    def thresholds(self, roles: tuple[str, ...]) -> list[tuple[Rule, float, bool]]:
        """The (rule, threshold in bytes, relative to baseline) that apply to a metric's roles."""
        out: list[tuple[Rule, float, bool]] = []
        if "spill" in roles and self.spill_gb is not None:
            out.append(("spill", self.spill_gb * GIB, True))
        if "host" in roles and self.host_max_gb is not None:
            out.append(("host_max", self.host_max_gb * GIB, False))
        if "device" in roles:
            if self.device_max_gb is not None:
                out.append(("device_max", self.device_max_gb * GIB, False))
            if self.device_growth_gb is not None:
                out.append(("device_growth", self.device_growth_gb * GIB, True))
        return out

    def breach(
        self, roles: tuple[str, ...], value: float, baseline: float | None
    ) -> tuple[Rule, float] | None:
        """The first rule that ``value`` breaks, with its absolute limit in bytes; else None.

        A rule relative to the baseline is not checked until the baseline is known.
        """
        for rule, threshold, relative in self.thresholds(roles):
            if relative:
                if baseline is None:
                    continue
                limit = baseline + threshold
            else:
                limit = threshold
            if value > limit:
                return rule, limit
        return None

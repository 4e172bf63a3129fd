"""The watchdog on an NVIDIA GPU: a PyTorch process overruns its device ceiling and is stopped.

Runs ``tools/gpu_watchdog_check.py`` (one trial: a child allocating 2 GiB every 0.2 s past 8 GiB
above its baseline) and checks its result: the NVML probe tripped, the child was gone within one
second of crossing, and NVML attributed the growth to the child's pid. Skips with the reason where
NVML finds no NVIDIA driver or device, or where PyTorch has no CUDA.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memwatch import NvmlProbe

REPO = Path(__file__).resolve().parents[2]
CHECK = REPO / "tools" / "gpu_watchdog_check.py"

pytestmark = pytest.mark.gpu


def nvml_reason() -> str | None:
    probe = NvmlProbe()
    ok, reason = probe.available()
    probe.close()
    return None if ok else reason


def test_nvml_probe_samples_the_device() -> None:
    reason = nvml_reason()
    if reason:
        pytest.skip(reason)
    probe = NvmlProbe()
    assert probe.available() == (True, None)
    values = probe.sample()
    probe.close()
    assert values["gpu0_total_bytes"] >= values["gpu0_used_bytes"] >= 0
    assert probe.roles("gpu0_used_bytes") == ("device",)


def test_pytorch_process_over_device_ceiling_is_stopped(tmp_path: Path) -> None:
    reason = nvml_reason()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "gpu.json"
    res = subprocess.run([sys.executable, str(CHECK), "--trials", "1", "--json", str(out)],
                         capture_output=True, text=True, timeout=300)
    if res.returncode == 2:
        pytest.skip(json.loads(res.stdout)["skipped"])
    assert out.exists(), res.stderr[-2000:]
    result = json.loads(out.read_text())
    print(json.dumps({k: v for k, v in result.items() if k != "results"}, indent=1))
    trial = result["results"][0]
    assert result["tripped"] == 1 and trial["rule"] == "device_growth"
    assert trial["metric"] == "gpu0_used_bytes"
    assert not trial["child_reached_cap"]
    assert trial["crossing_to_gone_s_child_clock"] < 1.0
    assert result["attribution_ok"], trial["attributed_bytes_by_pid"]
    assert str(trial["child_pid"]) in trial["attributed_bytes_by_pid"]
    assert trial["timeline_points"] >= 5
    assert result["children_left_running"] == []
    assert res.returncode == 0, res.stderr[-2000:]


def test_nvml_power_and_energy_counter_on_the_device() -> None:
    """The real path of the energy figures: the probe reads power and a counter that moves, and
    the suite's meter turns a span into joules and a mean power near the probe's reading."""
    import time

    from suite import gpu

    reason = nvml_reason()
    if reason:
        pytest.skip(reason)
    probe = NvmlProbe()
    assert probe.available() == (True, None)
    first = probe.sample()
    with gpu.EnergyMeter() as meter:
        time.sleep(2.0)
    last = probe.sample()
    probe.close()
    assert first.get("gpu0_power_w", 0) > 0, first
    assert last["gpu0_energy_j"] > first["gpu0_energy_j"]  # the counter moves even at idle
    e = meter.result(100)
    assert e is not None and e.joules > 0 and e.j_per_token == pytest.approx(e.joules / 100)
    assert 5 < (e.mean_power_w or 0) < 2000  # watts: an idle-to-busy GPU, not mW or kW

"""One runtime on the GPU at a time: the machine-wide lock, the "GPU is free" check, the baseline.

The lock is tested across real processes. Without an NVIDIA driver the GPU checks are no-ops that
say why; the tests marked `gpu` run where a driver answers (they start a real CUDA process with
PyTorch when it is installed).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from suite import gpu
from suite.errors import SuiteError

HOLD_LOCK = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from suite.gpu import machine_lock
    with machine_lock(Path(sys.argv[1])):
        print("locked", flush=True)
        time.sleep(float(sys.argv[2]))
""")


def hold_lock_in_child(path: Path, seconds: float) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(path), str(seconds)],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "locked"
    return child


def test_lock_refuses_a_second_holder_and_names_the_first(tmp_path: Path):
    path = tmp_path / "gpu.lock"
    child = hold_lock_in_child(path, 30)
    try:
        with pytest.raises(SuiteError) as info:
            with gpu.machine_lock(path):
                pass
        message = str(info.value)
        assert f"pid {child.pid}" in message and "\n" not in message
    finally:
        child.kill()
        child.wait()
    with gpu.machine_lock(path):  # free again once the holder is gone
        pass


def test_lock_waits_for_the_holder_when_asked(tmp_path: Path):
    path = tmp_path / "gpu.lock"
    child = hold_lock_in_child(path, 1.5)
    t0 = time.monotonic()
    try:
        with gpu.machine_lock(path, wait_s=30):
            waited = time.monotonic() - t0
    finally:
        child.wait()
    assert 0.5 < waited < 30


def test_lock_is_released_when_the_holder_is_killed(tmp_path: Path):
    """A holder killed with SIGKILL runs no cleanup, yet the kernel frees its lock: the next taker
    gets it at once (no wait), the lock file names the new holder, and the lock is really held."""
    path = tmp_path / "gpu.lock"
    child = hold_lock_in_child(path, 60)
    assert path.read_text().startswith(f"pid {child.pid} since ")
    child.kill()
    assert child.wait() == -signal.SIGKILL
    with gpu.machine_lock(path) as held:  # wait_s=0: a lock still held would be refused at once
        assert held == path
        assert path.read_text().startswith(f"pid {os.getpid()} since ")
        with pytest.raises(SuiteError, match=f"pid {os.getpid()} since "):
            with gpu.machine_lock(path):
                pass


def test_without_a_driver_everything_is_a_no_op_with_a_reason():
    ok, reason = gpu.available()
    if ok:
        pytest.skip("an NVIDIA driver answers here")
    assert reason
    assert gpu.device_memory_used() is None
    assert gpu.compute_processes() == []
    gpu.check_free()
    with gpu.exclusive_device() as lease:
        assert not lease.locked and lease.reason == reason
    waited = gpu.wait_for_baseline(None, timeout_s=1)
    assert waited.reached and waited.reason


CUDA_HOLDER = textwrap.dedent("""
    import sys, time, torch
    x = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
""")


@pytest.mark.gpu
def test_a_cuda_process_is_refused_by_name_and_memory_returns_to_baseline(tmp_path: Path, monkeypatch):
    ok, reason = gpu.available()
    if not ok:
        pytest.skip(f"no NVIDIA GPU: {reason}")
    pytest.importorskip("torch")
    monkeypatch.setenv("SUITE_GPU_LOCK", str(tmp_path / "gpu.lock"))
    gpu.check_free()  # nothing else on the GPU before the test
    baseline = gpu.device_memory_used()
    assert baseline is not None
    holder = subprocess.Popen([sys.executable, "-c", CUDA_HOLDER, str(2 * 2**30), "120"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        used = gpu.device_memory_used()
        assert used is not None and used > baseline + 2**30
        with pytest.raises(SuiteError) as info:
            with gpu.exclusive_device():
                pass
        message = str(info.value)
        print(f"\nrefusal: {message}")
        assert "not free" in message and "pid" in message and "\n" not in message
    finally:
        holder.kill()
        holder.wait()
    waited = gpu.wait_for_baseline(baseline, timeout_s=60)
    assert waited.reached, waited.reason
    with gpu.exclusive_device() as lease:
        assert lease.locked and lease.baseline_bytes is not None


@pytest.mark.gpu
def test_baseline_wait_times_out_while_memory_is_held(tmp_path: Path):
    ok, reason = gpu.available()
    if not ok:
        pytest.skip(f"no NVIDIA GPU: {reason}")
    pytest.importorskip("torch")
    baseline = gpu.device_memory_used()
    holder = subprocess.Popen([sys.executable, "-c", CUDA_HOLDER, str(2 * 2**30), "60"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        waited = gpu.wait_for_baseline(baseline, timeout_s=2)
        assert not waited.reached and "above baseline" in (waited.reason or "")
    finally:
        holder.kill()
        holder.wait()

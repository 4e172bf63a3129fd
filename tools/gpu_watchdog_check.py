#!/usr/bin/env python3
"""Check the memory watchdog on an NVIDIA GPU: a PyTorch process that overruns is stopped.

A child process (PyTorch) allocates device memory step by step (default 2 GiB every 0.2 s) past a
device ceiling (default 8 GiB above the baseline taken once the child's CUDA context exists). The
watchdog watches it through NVML (memwatch.NvmlProbe, with the child's pids for per-process
attribution) and the process tree, kills the child's process group on the trip, and this script
prints one JSON object: whether it tripped, the latency (from the start of the allocation that
crossed, on the child's own clock, to the child being gone), the device memory NVML attributed to
the child's pid against what the child says it allocated, when the memory was back to baseline,
and the timeline's length. Exit status 0 when every trial tripped within one second and the
attribution matched, 1 otherwise, 2 when no NVIDIA GPU or PyTorch is available here.

Needs: memwatch (this repository's ``watchdog/`` folder, found relative to this file) and its
dependencies (pydantic, psutil, nvidia-ml-py), and torch with CUDA for the child. The parent does
not import torch, so it holds no device memory itself. Every child is killed before it exits.

    python tools/gpu_watchdog_check.py [--trials 3] [--step-gib 2] [--period 0.2]
                                       [--ceiling-gib 8] [--cap-gib 40] [--device 0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "watchdog"))

import psutil  # noqa: E402

from memwatch import GIB, NvmlProbe, Policy, ProcessTreeProbe, Watchdog  # noqa: E402
from memwatch.targets import ProcessGroupTarget  # noqa: E402

CHILD = r"""
import sys, time
import torch
step, period, cap, device, log_path = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
dev = torch.device("cuda", device)
torch.zeros(1, device=dev)  # the CUDA context: part of the baseline
torch.cuda.synchronize(dev)
log = open(log_path, "w")
log.write(f"ready {time.time()} {time.time()} 0\n"); log.flush()
sys.stdin.readline()  # go
blocks, total = [], 0
while total < cap:
    time.sleep(period)
    before = time.time()
    log.write(f"begin {before} {before} {total}\n"); log.flush()
    blocks.append(torch.empty(step, dtype=torch.uint8, device=dev).fill_(1))  # cudaMalloc'd, touched
    torch.cuda.synchronize(dev)
    total += step
    log.write(f"step {before} {time.time()} {total}\n"); log.flush()
log.write(f"cap {time.time()} {time.time()} {total}\n"); log.flush()
"""


def read_log(path: Path) -> list[tuple[str, float, float, int]]:
    rows = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4:
            rows.append((parts[0], float(parts[1]), float(parts[2]), int(parts[3])))
    return rows


def crossing_time(rows: list[tuple[str, float, float, int]], allowance: float) -> float | None:
    """Start of the allocation that took the child's own allocations past the allowance."""
    for event, before, _after, total in rows:
        if event == "step" and total > allowance:
            return before
    begun = [r for r in rows if r[0] == "begin"]
    return begun[-1][1] if begun and rows[-1][0] == "begin" else None


def device_used(probe: NvmlProbe, index: int) -> float:
    return probe.sample()[f"gpu{index}_used_bytes"]


def trial(args: argparse.Namespace, workdir: Path, n: int) -> dict[str, object]:
    step, cap = int(args.step_gib * GIB), int(args.cap_gib * GIB)
    log_path = workdir / f"child-{n}.log"
    target = ProcessGroupTarget(
        [sys.executable, "-c", CHILD, str(step), str(args.period), str(cap), str(args.device), str(log_path)],
        stdin=subprocess.PIPE, text=True,
    )
    nvml = NvmlProbe(devices=[args.device])
    policy = Policy(spill_gb=None, device_growth_gb=args.ceiling_gib, interval_s=args.interval)
    wd = Watchdog(policy, [nvml, ProcessTreeProbe(target.pid)], stop=target.stop, pids=target.pids)
    child_pid = target.pid
    started = False
    try:
        deadline = time.monotonic() + 120
        while not (log_path.exists() and "ready" in log_path.read_text()):
            if target.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the PyTorch child did not start (exit {target.proc.poll()})")
            time.sleep(0.05)
        wd.start()
        started = True
        time.sleep(5 * args.interval)
        wd.rebaseline()  # baseline: the device with the child's CUDA context
        time.sleep(3 * args.interval)
        assert target.proc.stdin is not None
        target.proc.stdin.write("go\n")
        target.proc.stdin.flush()
        tripped = wd.wait_tripped(timeout=args.cap_gib / args.step_gib * args.period + 30)
        gone = wd.wait_gone(timeout=policy.gone_timeout_s) if tripped else False
        # memory back to baseline: the device's used memory within 1 GiB of the baseline again
        base = None
        released_s = None
        if gone and wd.trip is not None:
            base = wd.trip.baseline_bytes
            probe = NvmlProbe(devices=[args.device])
            if probe.available()[0] and base is not None:
                t_gone = wd.trip.gone_unix or time.time()
                end = time.monotonic() + 30
                while time.monotonic() < end:
                    if device_used(probe, args.device) <= base + GIB:
                        released_s = round(time.time() - t_gone, 4)
                        break
                    time.sleep(0.01)
            probe.close()
        time.sleep(0.3)
    finally:
        target.stop()
        report = wd.stop() if started else None
    rows = read_log(log_path)
    allocated = max((r[3] for r in rows if r[0] == "step"), default=0)
    out: dict[str, object] = {"trial": n, "child_pid": child_pid, "tripped": bool(report and report.tripped),
                              "child_reached_cap": any(r[0] == "cap" for r in rows),
                              "child_allocated_bytes": allocated}
    if report is None:
        return out
    trip = report.trip
    nv = next(p for p in report.probes if p.name == "nvml")
    attributed = nv.details.get("runtime_process_peak_bytes", {}) if nv.available else {}
    out.update(
        nvml_available=nv.available, nvml_reason=nv.reason,
        gpu=(nv.details.get("devices") or [{}])[0].get("name"), driver=nv.details.get("driver"),
        sample_count=report.sample_count, timeline_points=len(report.timeline.t_s),
        watchdog_cpu_pct_of_core=report.cpu_pct_of_core, watchdog_cpu_ms_per_sample=report.cpu_ms_per_sample,
        attributed_bytes_by_pid=attributed,
        attributed_to_child_bytes=attributed.get(str(child_pid)),
        other_process_peak_bytes=nv.details.get("other_process_peak_bytes"),
    )
    if trip is not None:
        cross = crossing_time(rows, args.ceiling_gib * GIB)
        out.update(
            metric=trip.metric, rule=trip.rule, threshold_bytes=trip.threshold_bytes,
            baseline_bytes=trip.baseline_bytes, value_bytes=trip.value_bytes,
            detect_to_gone_s=trip.gone_s, crossing_to_gone_s_watchdog=trip.crossing_to_gone_s,
            crossing_to_gone_s_child_clock=(round(trip.gone_unix - cross, 4)
                                            if trip.gone_unix and cross else None),
            memory_back_to_baseline_after_gone_s=released_s,
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description="Check the memory watchdog on an NVIDIA GPU.")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--step-gib", type=float, default=2.0)
    ap.add_argument("--period", type=float, default=0.2)
    ap.add_argument("--ceiling-gib", type=float, default=8.0, help="device growth allowed above baseline")
    ap.add_argument("--cap-gib", type=float, default=40.0, help="the child stops by itself here")
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args()

    ok, reason = NvmlProbe().available()
    if not ok:
        print(json.dumps({"skipped": reason}))
        return 2
    check = subprocess.run([sys.executable, "-c", "import torch; assert torch.cuda.is_available()"],
                           capture_output=True, text=True)
    if check.returncode != 0:
        print(json.dumps({"skipped": "PyTorch with CUDA is not available: " + (check.stderr.strip().splitlines() or ["?"])[-1]}))
        return 2

    me = psutil.Process()
    trials: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="memwatch-gpu-") as tmp:
        for n in range(args.trials):
            try:
                trials.append(trial(args, Path(tmp), n))
            except Exception as exc:  # a child that could not start: recorded, not a traceback
                trials.append({"trial": n, "tripped": False, "child_reached_cap": False,
                               "child_allocated_bytes": 0, "error": f"{type(exc).__name__}: {exc}"})
    leftovers = [c.pid for c in me.children(recursive=True) if c.status() != psutil.STATUS_ZOMBIE]
    lat = [t["crossing_to_gone_s_child_clock"] for t in trials if t.get("crossing_to_gone_s_child_clock") is not None]
    # the device's growth at the trip was the child's: NVML must attribute (nearly) all of it
    attribution_ok = all(
        t.get("value_bytes") is not None
        and (t.get("attributed_to_child_bytes") or 0)
        >= 0.9 * (float(t["value_bytes"]) - float(t["baseline_bytes"]))  # type: ignore[arg-type]
        for t in trials
    )
    result = {
        "tripped": sum(bool(t["tripped"]) for t in trials),
        "trials": len(trials),
        "latency_median_s": statistics.median(lat) if lat else None,
        "latency_max_s": max(lat) if lat else None,
        "attribution_ok": attribution_ok,
        "children_left_running": leftovers,
        "policy": {"device_growth_gb": args.ceiling_gib, "step_gib": args.step_gib, "period_s": args.period,
                   "interval_s": args.interval},
        "results": trials,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    good = (result["tripped"] == len(trials) and lat and max(lat) < 1.0 and attribution_ok
            and not leftovers and not any(t["child_reached_cap"] for t in trials))
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())

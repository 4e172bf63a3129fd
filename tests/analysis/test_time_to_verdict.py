"""The time-to-verdict benchmark's quick form: its per-request series is the stage's own code, it
covers intermittent causes, carryover and causes that show in some launches only, and its last line
speaks over every truth with a cause."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_benchmark_runs_the_stages_series_over_every_truth_and_says_so_in_its_last_line() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_time_to_verdict as b

    assert b.in_launch_series.__doc__ and "stage's own series code" in b.in_launch_series.__doc__
    names = {t.name for t in b.TRUTHS}
    assert {"intermittent-5", "intermittent-30", "carryover-10", "half-launches", "launch-effect"} <= names
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_time_to_verdict.py"), "--trials", "60"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    last = r.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"every truth with a cause \((\d+)\): launches per credited cause [\d.inf]+ \(launch rows only: "
                     r"[\d.inf]+\); no-effect matrix \d+ requests, [\d.]+ launches \(launch rows only: \d+, [\d.]+\); "
                     r"worst false credit ([\d.]+); worst power [\d.]+ \(launch rows only: [\d.]+\)", last)
    assert m, last
    assert int(m[1]) == sum(1 for t in b.TRUTHS if t.cause)
    assert float(m[2]) <= 0.1  # 60 trials a truth: the level 0.05 plus the simulation's own error

"""The calibration benchmark's quick form: simulated data with known truths through the analysis
functions the pages use; every interval must reach its coverage and every claim its error rate.

A handful of scenarios at 200 runs each (the full form, `python benchmarks/bench_calibration.py`,
runs every scenario 1,000 times): those where the suite's earlier statistics failed most (one
launch in ten differing at 6 and 8 launches, a control with no effect at n = 5 and 20, a paired
difference from 2 and 3 sections, answers cut at the cap, a transient in one launch, two launches
that switch right after their first request, one prompt in ten varying rarely over 12 sessions).
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_calibration  # noqa: E402
import pytest  # noqa: E402


def test_quick_calibration_meets_both_targets():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert bench_calibration.main(["--quick"]) == 0
    lines = out.getvalue().strip().splitlines()
    m = re.fullmatch(r"worst interval coverage (\d\.\d\d); worst false-claim rate (\d\.\d\d)", lines[-1])
    assert m, lines[-1]
    cover, false = float(m.group(1)), float(m.group(2))
    table = "\n".join(lines)
    assert cover >= bench_calibration.COVERAGE_TARGET, table
    assert false <= bench_calibration.FALSE_CLAIM_TARGET, table
    # every scenario printed a row, and none is flagged
    assert sum(1 for line in lines if not line.startswith("#") and ": " in line) >= 14
    assert " !" not in table, table
    # the paired difference from 2 sections prints no interval and no direction
    two = next(line for line in lines if line.startswith("paired n=2"))
    assert "paired difference: none printed" in two and "higher power 0.000" in two


def test_the_benchmark_counts_a_false_claim_as_false():
    """The tally itself: a claim printed while false is counted, one printed while true is not."""
    assert bench_calibration.covers((0.2, 0.4), 0.4) and not bench_calibration.covers((0.2, 0.4), 0.41)
    truth = bench_calibration.launch_truth("launch", 6, 20, 0.1)
    assert truth["theta"] == pytest.approx(0.82) and truth["differ"] == 0.1 and truth["launches_differ"]
    assert not bench_calibration.launch_truth("iid", 6, 20, 0.1)["launches_differ"]


def test_a_false_claim_is_tallied_against_its_scenario(monkeypatch):
    """run_scenario counts a printed false claim and an interval that misses; a claim that is true
    by construction counts as power, never as a false claim."""
    outcomes = [bench_calibration.Outcome(intervals={"i": (True, False)}, claims={"c": (True, True, True)}),
                bench_calibration.Outcome(intervals={"i": (True, True)}, claims={"c": (False, True, True)}),
                bench_calibration.Outcome(intervals={"i": (False, False)}, claims={"c": (True, False, False)})]
    it = iter(outcomes)
    monkeypatch.setitem(bench_calibration.FAMILIES, "fake", (lambda quick: [{}], lambda rng, p: next(it)))
    _, tallies = bench_calibration.run_scenario(("fake", {}, 3, 1, 0))
    i, c = tallies["interval: i"], tallies["claim: c"]
    assert (i.runs, i.printed, i.covered) == (3, 2, 1)
    assert (c.false_runs, c.false_printed, c.true_runs, c.true_printed) == (2, 1, 1, 1)

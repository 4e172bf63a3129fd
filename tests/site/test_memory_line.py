"""The memory chart covers every launch of an arm: the main launch's samples and each fresh
launch's (restarts, sessions, control rows), shifted by when that launch started."""

from __future__ import annotations

from types import SimpleNamespace

from memwatch.policy import Policy
from memwatch.report import Timeline, WatchdogReport

from suite.records import LaunchWatchdog
from suite.site.figures import memory_line


def report(started: float, t: list[float], rss: list[float | None]) -> WatchdogReport:
    return WatchdogReport(policy=Policy(), probes=[], started_unix=started, duration_s=t[-1] if t else 0.0,
                          sample_count=len(t), cpu_s=0.0, cpu_pct_of_core=0.0,
                          timeline=Timeline(t_s=t, metrics={"host_rss_bytes": rss, "cpu_pct": [1.0] * len(t)}))


def test_every_launch_is_on_the_line_at_its_own_time() -> None:
    main = report(1000.0, [0.0, 1.0, 2.0], [1.0, 2.0, 3.0])
    later = [LaunchWatchdog(label="restarts: default", report=report(1030.0, [0.0, 5.0], [4.0, 5.0])),
             LaunchWatchdog(label="restarts: default", report=report(1010.0, [0.0, 1.0], [6.0, None]))]
    line = memory_line(SimpleNamespace(watchdog=main, launch_watchdogs=later))
    assert line.launches == 3
    assert line.t_s == [0.0, 1.0, 2.0, 10.0, 11.0, 30.0, 35.0]  # in the order the launches started
    assert line.metrics == {"host_rss_bytes": [1.0, 2.0, 3.0, 6.0, None, 4.0, 5.0]}  # memory only
    assert line.trip_t_s is None
    # each sample knows its launch: the chart draws three lines, none joined to another
    assert line.launch == [0, 0, 0, 1, 1, 2, 2] and line.labels == ["main", "restarts: default", "restarts: default"]


def test_the_chart_draws_each_launch_apart() -> None:
    """Two launches that overlap in time (a control row started while the last sample of the one
    before was still being written) are two lines, not one joined block with 0 GiB between them."""
    import json

    from suite.site.charts import MemorySeries, _memory_spec

    series = MemorySeries("a", [0.0, 1.0, 0.5, 1.5], {"host_rss_bytes": [2**30, 2**30, 2**31, 2**31]},
                          launch=[0, 0, 1, 1])
    assert {r["launch"] for r in series.rows()} == {0, 1}
    spec = json.loads(_memory_spec((("a", False, False),), 600))
    line = spec["hconcat"][0]["layer"][0] if "layer" in spec["hconcat"][0] else spec["hconcat"][0]
    assert line["encoding"]["detail"]["field"] == "launch"


def test_a_run_without_a_watchdog_has_an_empty_line() -> None:
    line = memory_line(SimpleNamespace(watchdog=None, launch_watchdogs=[]))
    assert line.t_s == [] and line.metrics == {} and line.launches == 0

"""The memory watchdog (memwatch) against real processes: trips, no false trips, probes, CLI.

Children are real Python processes that fill memory step by step (``CHILD_SOURCE``); the watchdog
reads their RSS through psutil and /proc, and stops them with real signals. Latency is measured
against the child's own clock: from the start of the allocation that crossed the threshold to the
moment the watchdog saw the process gone.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from memwatch import (
    GIB,
    CgroupProbe,
    NvmlProbe,
    Policy,
    ProcessTreeProbe,
    Watchdog,
    WatchdogReport,
    WindowsSharedGpuProbe,
    default_probes,
)
from memwatch.cgroup import memory_cgroup_of_pid
from memwatch.targets import ProcessGroupTarget
from memwatch.timeline import TimelineRecorder
from memwatch.windows import parse_typeperf_line

REPO = Path(__file__).resolve().parents[2]

CHILD_SOURCE = r'''
import os, subprocess, sys, time

PAGE = os.sysconf("SC_PAGE_SIZE")

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE

def grow(step, period, cap, log_path):
    # each log line: event, unix time before the allocation, after it, own RSS; "begin" is
    # written before each allocation, so one cut short by the watchdog still shows when it began
    blocks = []
    with open(log_path, "w") as log:
        t = time.time()
        log.write(f"start {t} {t} {rss()}\n"); log.flush()
        while rss() < cap:
            time.sleep(period)
            before = time.time()
            log.write(f"begin {before} {before} {rss()}\n"); log.flush()
            blocks.append(b"\x01" * step)  # filled, so every page is resident
            log.write(f"step {before} {time.time()} {rss()}\n"); log.flush()
        log.write(f"cap {time.time()} {time.time()} {rss()}\n")  # the watchdog never stopped it

def hold(size, seconds, log_path):
    with open(log_path, "w") as log:
        block = b"\x01" * size
        t = time.time()
        log.write(f"holding {t} {t} {rss()}\n"); log.flush()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(0.05)
        log.write(f"done {time.time()} {time.time()} {rss()} {len(block)}\n")

def wait_go_then_grow(step, period, cap, log_path):
    sys.stdin.readline()  # the test moves this process into a cgroup first
    grow(step, period, cap, log_path)

kind, *a = sys.argv[1:]
if kind == "grow":
    grow(int(a[0]), float(a[1]), int(a[2]), a[3])
elif kind == "go-grow":
    wait_go_then_grow(int(a[0]), float(a[1]), int(a[2]), a[3])
elif kind == "hold":
    hold(int(a[0]), float(a[1]), a[2])
elif kind == "tree":  # grandparent -> parent -> grower: the growth is two levels down
    depth = int(a[0])
    if depth > 0:
        subprocess.Popen([sys.executable, __file__, "tree", str(depth - 1), *a[1:]]).wait()
    else:
        grow(int(a[1]), float(a[2]), int(a[3]), a[4])
'''

MB = 1_000_000
STEP = 50 * MB  # grow 50 MB ...
PERIOD = 0.1  # ... every 100 ms
THRESHOLD = 300 * MB
CAP = 900 * MB  # a grower that reaches this exits by itself: the watchdog failed


@pytest.fixture(scope="module")
def child_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("memwatch") / "child.py"
    path.write_text(CHILD_SOURCE)
    return path


def read_log(path: Path) -> list[tuple[str, float, float, int]]:
    rows = []
    for line in path.read_text().splitlines():
        parts = line.split()
        rows.append((parts[0], float(parts[1]), float(parts[2]), int(parts[3])))
    return rows


def crossing_time(rows: list[tuple[str, float, float, int]], limit: float) -> float:
    """When the allocation that took the child's RSS over the limit began (so latencies measured
    from it are upper bounds): the first completed step that ended over the limit, else the
    allocation the child was in when it was killed."""
    for event, before, _after, rss in rows:
        if event == "step" and rss > limit:
            return before
    begun = [r for r in rows if r[0] == "begin"]
    if begun and rows[-1][0] == "begin" and rows[-1][3] <= limit:
        return begun[-1][1]
    raise AssertionError(f"the child never crossed {limit:.0f} bytes: {rows}")


def run_grower_trial(child_script: Path, tmp: Path, policy: Policy, limit: float) -> tuple[WatchdogReport, float, list]:
    log_path = tmp / f"grow-{uuid.uuid4().hex[:8]}.log"
    target = ProcessGroupTarget(
        [sys.executable, str(child_script), "grow", str(STEP), str(PERIOD), str(CAP), str(log_path)]
    )
    try:
        wd = Watchdog(policy, probes=[ProcessTreeProbe(target.pid)], stop=target.stop, pids=target.pids)
        with wd:
            wd.wait_tripped(timeout=10)
            wd.wait_gone(timeout=5)
            time.sleep(0.2)  # a couple of samples after the stop
        report = wd.report
        assert report is not None
    finally:
        if target.proc.poll() is None:
            target.stop()
    rows = read_log(log_path)
    assert report.tripped, f"not tripped; child log: {rows[-3:]}"
    assert all(r[0] != "cap" for r in rows), "the child reached its cap: the watchdog did not stop it"
    assert report.trip is not None and report.trip.gone_unix is not None
    latency = report.trip.gone_unix - crossing_time(rows, limit)
    return report, latency, rows


def test_grower_stopped_within_one_second_20_of_20(child_script: Path, tmp_path: Path) -> None:
    policy = Policy(host_max_gb=THRESHOLD / GIB, spill_gb=None, interval_s=0.1)
    latencies = []
    detect_to_gone = []
    for trial in range(20):
        report, latency, rows = run_grower_trial(child_script, tmp_path, policy, THRESHOLD)
        trip = report.trip
        assert trip is not None
        assert trip.probe == "process_tree" and trip.metric == "host_rss_bytes"
        assert trip.rule == "host_max"
        assert trip.threshold_bytes == pytest.approx(THRESHOLD)
        assert THRESHOLD < trip.value_bytes < THRESHOLD + 2 * STEP
        assert trip.gone_basis == "processes exited"
        assert 0 <= latency < 1.0, f"trial {trial}: stopped {latency:.3f} s after crossing"
        # the record: trip, timeline and the window around the trip
        rss = report.timeline.metrics["host_rss_bytes"]
        assert len(report.timeline.t_s) == len(rss) >= 4
        assert max(v for v in rss if v is not None) >= trip.value_bytes
        assert report.trip_window is not None and trip.t_s in report.trip_window.t_s
        assert report.sample_count >= 4
        latencies.append(latency)
        detect_to_gone.append(trip.gone_s)
    med, worst = statistics.median(latencies), max(latencies)
    print(f"\nwatchdog trip latency over 20 trials (start of the crossing allocation -> gone): "
          f"median {med * 1000:.0f} ms, max {worst * 1000:.0f} ms; detection -> gone: median "
          f"{statistics.median(detect_to_gone) * 1000:.0f} ms, max {max(detect_to_gone) * 1000:.0f} ms; "
          f"load average {os.getloadavg()[0]:.1f}")
    assert worst < 1.0


def test_spill_over_baseline_trips(child_script: Path, tmp_path: Path) -> None:
    # 0.25 GiB above the first sample's value (the spill rule, as on a GPU host)
    policy = Policy(spill_gb=0.25, interval_s=0.1)
    report, latency, rows = run_grower_trial(child_script, tmp_path, policy, limit=0)
    trip = report.trip
    assert trip is not None and trip.rule == "spill"
    assert trip.baseline_bytes is not None and trip.baseline_bytes < 100 * MB
    assert trip.threshold_bytes == pytest.approx(trip.baseline_bytes + 0.25 * GIB)
    assert trip.value_bytes > trip.threshold_bytes
    assert report.baselines["host_rss_bytes"] == trip.baseline_bytes
    # the crossing, in the child's own log: the first step past baseline + allowance
    cross = crossing_time(rows, trip.threshold_bytes)
    assert trip.gone_unix - cross < 1.0


def test_whole_process_tree_is_watched_and_stopped(child_script: Path, tmp_path: Path) -> None:
    log_path = tmp_path / "tree.log"
    target = ProcessGroupTarget(
        [sys.executable, str(child_script), "tree", "2", str(STEP), str(PERIOD), str(CAP), str(log_path)]
    )
    seen: set[int] = set()

    def pids() -> list[int]:
        now = target.pids()
        seen.update(now)
        return now

    policy = Policy(host_max_gb=THRESHOLD / GIB, spill_gb=None)
    try:
        with Watchdog(policy, [ProcessTreeProbe(target.pid)], stop=target.stop, pids=pids) as wd:
            assert wd.wait_tripped(timeout=15)
            assert wd.wait_gone(timeout=5)
    finally:
        target.stop()
    report = wd.report
    assert report is not None and report.trip is not None
    assert len(seen) >= 3  # grandparent, parent, grower
    assert not [p for p in seen if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    rows = read_log(log_path)
    assert all(r[0] != "cap" for r in rows)
    assert report.peaks["host_procs"] >= 3


def steady_run(child_script: Path, tmp_path: Path, seconds: float) -> None:
    log_path = tmp_path / "hold.log"
    target = ProcessGroupTarget([sys.executable, str(child_script), "hold", str(100 * MB), str(seconds + 5), str(log_path)])
    stopped = []

    def stop() -> None:
        stopped.append(time.time())
        target.stop()

    policy = Policy(host_max_gb=THRESHOLD / GIB, spill_gb=0.5, interval_s=0.1)
    try:
        with Watchdog(policy, [ProcessTreeProbe(target.pid)], stop=stop, pids=target.pids) as wd:
            time.sleep(seconds)
            assert target.proc.poll() is None, "the steady child died"
    finally:
        target.stop()
    report = wd.report
    assert report is not None
    assert not report.tripped and report.trip is None and not stopped
    # it sampled at 10 Hz the whole time, and saw the child's 100 MB
    assert report.sample_count >= 0.9 * seconds / 0.1
    assert report.peaks["host_rss_bytes"] > 100 * MB
    assert report.peaks["host_rss_bytes"] < THRESHOLD
    assert len(report.timeline.t_s) <= 600


def test_steady_process_is_not_stopped_quick(child_script: Path, tmp_path: Path) -> None:
    steady_run(child_script, tmp_path, seconds=5)


@pytest.mark.slow
def test_steady_process_is_not_stopped_for_a_minute(child_script: Path, tmp_path: Path) -> None:
    steady_run(child_script, tmp_path, seconds=60)


def own_memory_cgroup() -> Path:
    found = memory_cgroup_of_pid(os.getpid())
    if found is None or found[1] != 1:
        pytest.skip("no cgroup v1 memory controller for this process")
    return found[0]


def test_cgroup_v1_probe_trips_on_a_real_cgroup(child_script: Path, tmp_path: Path) -> None:
    """A child moved into a fresh cgroup v1 memory group grows; CgroupProbe reads the group's files."""
    parent = own_memory_cgroup()
    group = parent / f"memwatch-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot create a memory cgroup under {parent}: {exc.strerror}")
    log_path = tmp_path / "cg.log"
    target = ProcessGroupTarget(
        [sys.executable, str(child_script), "go-grow", str(STEP), str(PERIOD), str(CAP), str(log_path)],
        stdin=subprocess.PIPE, text=True,
    )
    try:
        (group / "cgroup.procs").write_text(str(target.pid))
        by_pid = CgroupProbe(pid=target.pid)
        assert by_pid.available() == (True, None)
        assert by_pid.path == group and by_pid.version == 1
        probe = CgroupProbe(path=group)
        policy = Policy(host_max_gb=THRESHOLD / GIB, spill_gb=None)
        with Watchdog(policy, [probe], stop=target.stop) as wd:
            time.sleep(0.3)  # baseline, before the child grows
            assert target.proc.stdin is not None
            target.proc.stdin.write("go\n")
            target.proc.stdin.flush()
            assert wd.wait_tripped(timeout=10)
            assert wd.wait_gone(timeout=5)
        report = wd.report
        assert report is not None and report.trip is not None
        assert report.trip.probe == "cgroup" and report.trip.metric == "cgroup_working_set_bytes"
        assert report.trip.gone_basis == "processes exited"  # pids from the cgroup's cgroup.procs
        rows = read_log(log_path)
        assert all(r[0] != "cap" for r in rows)
        assert report.trip.gone_unix - crossing_time(rows, THRESHOLD) < 1.0
        status = report.probes[0]
        assert status.details["cgroup_version"] == 1 and status.details["source"] == "cgroup files"
        usage = report.timeline.metrics["cgroup_usage_bytes"]
        assert usage[0] is not None and usage[0] < 100 * MB
    finally:
        target.stop()
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def test_cgroup_probe_reads_this_process_cgroup() -> None:
    own_memory_cgroup()
    probe = CgroupProbe(pid=os.getpid())
    assert probe.available() == (True, None)
    values = probe.sample()
    assert values["cgroup_usage_bytes"] >= values["cgroup_working_set_bytes"] > 0
    assert os.getpid() in (probe.current_pids() or [])


def test_cgroup_probe_unknown_container_is_unavailable_with_reason() -> None:
    ok, reason = CgroupProbe("0123456789ab-no-such-container").available()
    assert not ok and reason and "not found" in reason


def test_probes_that_cannot_run_here_say_why() -> None:
    report_probes = {p.name: p for p in default_probes(pid=os.getpid())}
    assert set(report_probes) == {"nvml", "process_tree", "windows_shared_gpu"}
    wd = Watchdog(Policy(), list(report_probes.values()))
    wd.start()
    time.sleep(0.35)
    report = wd.stop()
    for status in report.probes:
        assert status.available or status.reason, status
    by_name = {p.name: p for p in report.probes}
    assert by_name["process_tree"].available and "host_rss_bytes" in by_name["process_tree"].metrics
    if sys.platform.startswith("linux") and "microsoft" not in os.uname().release.lower():
        assert by_name["windows_shared_gpu"].reason == "not Windows or WSL"
    # the report is JSON for summary.json and reads back
    again = WatchdogReport.model_validate_json(report.model_dump_json())
    assert again == report
    json.dumps(report.model_dump(mode="json"))
    assert report.cpu_s >= 0 and report.cpu_ms_per_sample is not None


def test_nvml_probe_reason_without_driver() -> None:
    ok, reason = NvmlProbe().available()
    if ok:
        pytest.skip("an NVIDIA driver is present: see test_watchdog_gpu.py")
    assert reason and ("NVIDIA" in reason or "nvidia-ml-py" in reason)


def test_windows_probe_unavailable_off_windows() -> None:
    if sys.platform == "win32" or "microsoft" in os.uname().release.lower():
        pytest.skip("this is a Windows or WSL host")
    assert WindowsSharedGpuProbe().available() == (False, "not Windows or WSL")


def test_typeperf_csv_rows_are_summed() -> None:
    assert parse_typeperf_line('"(PDH-CSV 4.0)","\\\\PC\\GPU Adapter Memory(luid_0x1_phys_0)\\Shared Usage"') is None
    assert parse_typeperf_line('"11/29/2026 23:01:02.345","1073741824.000000","536870912.000000"') == 1.5 * GIB
    assert parse_typeperf_line('"11/29/2026 23:01:03.345"," "') is None
    assert parse_typeperf_line("Exiting, please wait...") is None


def test_policy_rejects_bad_values() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        Policy(spill_gb=-1)
    with pytest.raises(ValidationError):
        Policy(interval_s=0)
    with pytest.raises(ValidationError):
        Policy(spil_gb=1)  # unknown key, e.g. a typo in a model card
    assert Policy().spill_gb == 1.5 and Policy().interval_s == 0.1


def test_long_timelines_are_bounded_and_keep_peaks() -> None:
    rec = TimelineRecorder(max_raw=2000)
    for i in range(10_000):
        rec.add(i * 0.1, {"m": float(i % 977), "only_late": 1.0} if i > 9000 else {"m": float(i % 977)})
    tl = rec.timeline(600)
    assert len(tl.t_s) <= 600 and len(rec.t) <= 2000
    assert max(v for v in tl.metrics["m"] if v is not None) == 976.0
    assert tl.aggregation == "max" and tl.raw_samples == 10_000
    assert tl.metrics["only_late"][0] is None and tl.metrics["only_late"][-1] == 1.0


def test_rebaseline_moves_the_spill_baseline(child_script: Path, tmp_path: Path) -> None:
    log_path = tmp_path / "hold.log"
    target = ProcessGroupTarget([sys.executable, str(child_script), "hold", str(200 * MB), "30", str(log_path)])
    try:
        # the child loads 200 MB at start-up: with a 0.1 GiB spill allowance that would trip,
        # unless the baseline is taken again once it is "ready"
        deadline = time.monotonic() + 10
        while not log_path.exists() or "holding" not in log_path.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with Watchdog(Policy(spill_gb=0.1), [ProcessTreeProbe(target.pid)], stop=target.stop) as wd:
            wd.rebaseline()
            time.sleep(1.0)
            assert not wd.tripped
        assert wd.report is not None and wd.report.baselines["host_rss_bytes"] > 200 * MB
    finally:
        target.stop()


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "watchdog"), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "memwatch", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_cli_stops_a_command_and_exits_3(child_script: Path, tmp_path: Path) -> None:
    log_path = tmp_path / "cli.log"
    res = run_cli("--host-max-gb", str(THRESHOLD / GIB), "--no-nvml", "--",
                  sys.executable, str(child_script), "grow", str(STEP), str(PERIOD), str(CAP), str(log_path))
    assert res.returncode == 3, res.stderr
    report = WatchdogReport.model_validate_json(res.stdout)
    assert report.tripped and report.trip is not None and report.trip.gone_s is not None
    rows = read_log(log_path)
    assert all(r[0] != "cap" for r in rows)
    assert report.trip.gone_unix - crossing_time(rows, THRESHOLD) < 1.0
    assert "tripped" in res.stderr.splitlines()[-1]


def test_cli_watches_a_pid_that_stays_under(child_script: Path, tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, str(child_script), "hold", str(50 * MB), "1.5", str(tmp_path / "h.log")])
    try:
        res = run_cli("--pid", str(proc.pid), "--host-max-gb", "1", "--no-nvml")
    finally:
        proc.wait(timeout=10)
    assert res.returncode == 0, res.stderr
    report = WatchdogReport.model_validate_json(res.stdout)
    assert not report.tripped and report.sample_count >= 5
    assert proc.returncode == 0  # it ran to its own end


def test_cli_bad_input_is_one_line() -> None:
    res = run_cli("--pid", "999999999")
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0
    assert "no process with pid 999999999" in res.stderr and "Traceback" not in res.stderr
    res = run_cli("--interval", "0", "--", "true")
    assert res.returncode == 2 and "--interval" in res.stderr and "Traceback" not in res.stderr
    res = run_cli("--", "/nonexistent/binary-xyz")
    assert res.returncode == 2 and "cannot start" in res.stderr and "Traceback" not in res.stderr
    res = run_cli()
    assert res.returncode == 2 and "nothing to watch" in res.stderr

"""The watchdog: samples its probes in a background thread and stops the runtime on a trip.

    wd = Watchdog(Policy(host_max_gb=8), probes=default_probes(pid=proc.pid),
                  stop=runtime.kill, pids=None)
    wd.start()
    ...                      # once the runtime is ready: wd.rebaseline()
    report = wd.stop()       # -> WatchdogReport, also on a trip

On the first sample that breaks the policy, ``stop`` is called at once from a separate thread
(sampling goes on, so the timeline shows the memory falling), and that thread then waits until the
runtime's processes are gone, polling every 10 ms, to measure how long stopping took. The runtime's
processes come from ``pids`` when given, else from the probes that know them (the process tree,
the cgroup). Relative thresholds use the baseline: the lowest value of a metric's first
``policy.baseline_samples`` samples, taken again by ``rebaseline()``. A runtime that loads its
model into host memory should be rebaselined once it is ready, or the load counts as spill.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from types import TracebackType

import psutil

from memwatch.policy import Policy
from memwatch.probe import Probe
from memwatch.report import ProbeStatus, TripEvent, WatchdogReport
from memwatch.timeline import TimelineRecorder, window_timeline

log = logging.getLogger(__name__)

_GONE_POLL_S = 0.01
_WINDOW_AFTER = 20  # samples kept at full resolution after a trip


def pids_alive(pids: Iterable[int]) -> list[int]:
    """The pids that still run (zombies count as gone)."""
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return alive


class Watchdog:
    """Watches a runtime's memory through probes and stops it when the policy says so."""

    def __init__(
        self,
        policy: Policy | None = None,
        probes: list[Probe] | None = None,
        stop: Callable[[], object] | None = None,
        pids: Callable[[], Iterable[int] | None] | None = None,
    ) -> None:
        self.policy = policy or Policy()
        self.probes = list(probes or [])
        self._stop_runtime = stop
        self._pids = pids
        self._active: list[Probe] = []
        self._status: dict[int, ProbeStatus] = {}
        self._owner: dict[str, Probe] = {}  # metric -> probe that reports it
        self._recorder = TimelineRecorder()
        self._baselines: dict[str, float] = {}
        self._baseline_seen: dict[str, int] = {}
        self._peaks: dict[str, float] = {}
        self._previous_t: float | None = None
        self._rebaselined: list[float] = []
        self._halt = threading.Event()
        self._tripped = threading.Event()
        self._gone = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopper: threading.Thread | None = None
        self._trip: TripEvent | None = None
        self._window: list[tuple[float, dict[str, float]]] = []
        self._window_left = 0
        self._latest: dict[str, float] = {}
        self._lock = threading.Lock()
        self._t0 = 0.0
        self._t0_unix = 0.0
        self._cpu_s = 0.0
        self._samples = 0
        self._late = 0
        self._report: WatchdogReport | None = None
        self._started = False

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> "Watchdog":
        """Check which probes can run here and start sampling in a background thread."""
        if self._started:
            return self
        self._started = True
        for probe in self.probes:
            try:
                ok, reason = probe.available()
            except Exception as exc:  # a probe that cannot even tell is unavailable
                ok, reason = False, f"{type(exc).__name__}: {exc}"
            self._status[id(probe)] = ProbeStatus(name=probe.name, available=ok, reason=reason)
            if ok:
                probe.attach_pids(self.runtime_pids)
                self._active.append(probe)
            else:
                log.info("probe %s unavailable: %s", probe.name, reason)
        self._t0 = time.monotonic()
        self._t0_unix = time.time()
        self._thread = threading.Thread(target=self._run, name="memwatch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> WatchdogReport:
        """Stop sampling (not the runtime) and return the report. Idempotent."""
        if self._report is not None:
            return self._report
        if not self._started:
            self.start()
        if self._stopper is not None:
            self._stopper.join(self.policy.gone_timeout_s + 5)
        self._halt.set()
        if self._thread is not None:
            self._thread.join(10)
        for probe in self._active:
            try:
                probe.close()
            except Exception as exc:
                log.debug("closing probe %s: %s", probe.name, exc)
        self._report = self._build_report()
        return self._report

    def __enter__(self) -> "Watchdog":
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def report(self) -> WatchdogReport | None:
        return self._report

    @property
    def tripped(self) -> bool:
        return self._tripped.is_set()

    @property
    def trip(self) -> TripEvent | None:
        return self._trip

    def wait_tripped(self, timeout: float | None = None) -> bool:
        """Block until a trip (True) or the timeout (False)."""
        return self._tripped.wait(timeout)

    def wait_gone(self, timeout: float | None = None) -> bool:
        """After a trip: block until the runtime is gone (True) or the timeout (False)."""
        return self._gone.wait(timeout)

    def latest(self) -> dict[str, float]:
        """The last sampled values."""
        with self._lock:
            return dict(self._latest)

    def rebaseline(self) -> None:
        """Take the baselines again from the next samples (call once the runtime is ready)."""
        with self._lock:
            self._baselines.clear()
            self._baseline_seen.clear()
            self._rebaselined.append(round(time.monotonic() - self._t0, 4))

    def runtime_pids(self) -> list[int] | None:
        """The runtime's current processes: from ``pids`` if given, else from the probes."""
        if self._pids is not None:
            got = self._pids()
            return None if got is None else list(got)
        found: set[int] | None = None
        for probe in self._active:
            got = probe.current_pids()
            if got is not None:
                found = (found or set()) | set(got)
        return None if found is None else sorted(found)

    # -- sampling -----------------------------------------------------------------------------
    def _run(self) -> None:
        cpu0 = time.thread_time()
        interval = self.policy.interval_s
        next_t = time.monotonic()
        while not self._halt.is_set():
            started = time.monotonic()
            if started - next_t > interval:
                self._late += 1
            values: dict[str, float] = {}
            for probe in self._active:
                try:
                    got = probe.sample()
                except Exception as exc:
                    self._probe_error(probe, exc)
                    continue
                for metric, value in got.items():
                    owner = self._owner.setdefault(metric, probe)
                    name = metric if owner is probe else f"{probe.name}.{metric}"
                    self._owner.setdefault(name, probe)
                    values[name] = value
            t = started - self._t0
            self._record(t, values)
            self._cpu_s = time.thread_time() - cpu0
            next_t += interval
            now = time.monotonic()
            if next_t < now:
                next_t = now
            self._halt.wait(next_t - now)
        self._cpu_s = time.thread_time() - cpu0

    def _probe_error(self, probe: Probe, exc: Exception) -> None:
        status = self._status[id(probe)]
        status.errors += 1
        if status.first_error is None:
            status.first_error = f"{type(exc).__name__}: {exc}"
            log.warning("probe %s failed: %s", probe.name, status.first_error)

    def _record(self, t: float, values: dict[str, float]) -> None:
        with self._lock:
            self._samples += 1
            self._latest = values
            self._recorder.add(t, values)
            for name, value in values.items():
                if value > self._peaks.get(name, float("-inf")):
                    self._peaks[name] = value
                seen = self._baseline_seen.get(name, 0)
                if seen < self.policy.baseline_samples:
                    old = self._baselines.get(name)
                    self._baselines[name] = value if old is None else min(old, value)
                    self._baseline_seen[name] = seen + 1
            if self._window_left > 0:
                self._window.append((t, dict(values)))
                self._window_left -= 1
        if not self._tripped.is_set():
            self._check(t, values)
        self._previous_t = t

    def _check(self, t: float, values: dict[str, float]) -> None:
        for name, value in values.items():
            probe = self._owner.get(name)
            if probe is None:
                continue
            metric = name.split(".", 1)[1] if name.startswith(probe.name + ".") else name
            roles = probe.roles(metric)
            if not roles:
                continue
            baseline = self._baselines.get(name) if self._baseline_seen.get(name, 0) >= self.policy.baseline_samples else None
            hit = self.policy.breach(roles, value, baseline)
            if hit is None:
                continue
            rule, limit = hit
            self._trip_now(probe, name, rule, limit, baseline, value, t)
            return

    def _trip_now(
        self, probe: Probe, metric: str, rule: str, limit: float, baseline: float | None,
        value: float, t: float,
    ) -> None:
        detected = time.monotonic()
        self._trip = TripEvent(
            probe=probe.name, metric=metric, rule=rule, threshold_bytes=limit,
            baseline_bytes=baseline if rule in ("spill", "device_growth") else None,
            value_bytes=value, t_s=round(t, 4),
            previous_sample_t_s=None if self._previous_t is None else round(self._previous_t, 4),
            detected_unix=time.time(), stop_called_s=0.0,
        )
        with self._lock:
            self._window = list(self._recorder.ring)
            self._window_left = _WINDOW_AFTER
        log.warning("trip: %s %s = %.0f > %.0f bytes (%s) at %.2f s; stopping the runtime",
                    probe.name, metric, value, limit, rule, t)
        self._stopper = threading.Thread(
            target=self._stop_runtime_and_wait, args=(detected,), name="memwatch-stop", daemon=True
        )
        self._stopper.start()
        # Set only once the stopper exists, so that stop() after wait_tripped() waits for it.
        self._tripped.set()

    def _stop_runtime_and_wait(self, detected: float) -> None:
        trip = self._trip
        assert trip is not None
        # whose processes to watch disappear: ask before stopping, the tree is unreadable after
        before = self.runtime_pids()
        trip.stop_called_s = round(time.monotonic() - detected, 6)
        if self._stop_runtime is not None:
            try:
                self._stop_runtime()
            except Exception as exc:
                trip.stop_error = f"{type(exc).__name__}: {exc}"
                log.error("stopping the runtime failed: %s", trip.stop_error)
        trip.stop_returned_s = round(time.monotonic() - detected, 6)
        deadline = detected + self.policy.gone_timeout_s
        if before is None:
            if trip.stop_error is None and self._stop_runtime is not None:
                gone_at = time.monotonic()
                trip.gone_basis = "stop returned"
            else:
                gone_at = None
        else:
            gone_at = None
            while time.monotonic() < deadline:
                now_pids = self.runtime_pids()
                watch = set(before) | set(now_pids or ())
                if not pids_alive(watch):
                    gone_at = time.monotonic()
                    trip.gone_basis = "processes exited"
                    break
                time.sleep(_GONE_POLL_S)
        if gone_at is not None:
            trip.gone_s = round(gone_at - detected, 6)
            trip.gone_unix = trip.detected_unix + (gone_at - detected)
            prev = trip.previous_sample_t_s
            start_s = self._t0 + (prev if prev is not None else trip.t_s)
            trip.crossing_to_gone_s = round(gone_at - start_s, 6)
            self._gone.set()
        else:
            log.error("the runtime was not gone %.1f s after the trip", self.policy.gone_timeout_s)

    # -- report -------------------------------------------------------------------------------
    def _build_report(self) -> WatchdogReport:
        duration = max(time.monotonic() - self._t0, 1e-9)
        statuses = []
        for probe in self.probes:
            st = self._status.get(id(probe)) or ProbeStatus(name=probe.name, available=False,
                                                            reason="not started")
            st.metrics = sorted(m for m, p in self._owner.items() if p is probe and m in self._recorder.cols)
            try:
                st.details = probe.details() if st.available else {}
            except Exception as exc:
                st.details = {"error": str(exc)}
            statuses.append(st)
        t = self._recorder.t
        mean_interval = (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 and not self._recorder.merged else None
        if mean_interval is None and self._samples > 1:
            mean_interval = duration / self._samples
        return WatchdogReport(
            policy=self.policy,
            probes=statuses,
            tripped=self._tripped.is_set(),
            trip=self._trip,
            started_unix=self._t0_unix,
            duration_s=round(duration, 4),
            sample_count=self._samples,
            mean_interval_s=None if mean_interval is None else round(mean_interval, 5),
            late_samples=self._late,
            baselines=dict(self._baselines),
            peaks=dict(self._peaks),
            rebaselined_at_s=list(self._rebaselined),
            cpu_s=round(self._cpu_s, 6),
            cpu_pct_of_core=round(100.0 * self._cpu_s / duration, 4),
            cpu_ms_per_sample=round(1000.0 * self._cpu_s / self._samples, 5) if self._samples else None,
            timeline=self._recorder.timeline(),
            trip_window=window_timeline(self._window) if self._window else None,
        )

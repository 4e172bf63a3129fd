"""A time budget above every request's own deadline: one stage takes at most so long in all.

A request is bounded by the client's `timeout_s`, its reply by a minimum byte rate
(`suite.client.wire`) and a number of lines (`suite.client.stream`); a stage that sends many
requests, each failing slowly, could still take hours (a gate prompt stops after five failures in
a row). `budget(seconds, what)` sets a deadline for every request any client of this process sends
meanwhile, from any thread: each request waits at most the time left, and once it is spent every
request fails at once with a `ClientError` naming the budget ("stage gate: its time budget of
600 s is spent"), so the stage's own failure rules end it in moments. Budgets nest: the earliest
deadline holds. `stage_budget_s` is the bench's budget of one stage (from its planned requests).
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Iterator

from suite.client.replies import ClientError

BUDGET_ENV = "SUITE_STAGE_BUDGET_S"  # a fixed budget for every stage, in seconds (overrides the rule below)
STAGE_MIN_S = 1800.0  # a stage's budget is at least this,
PER_REQUEST_S = 120.0  # or this much per planned request if more,
UNPLANNED_S = 4 * 3600.0  # or this when the stage cannot say how many requests it sends

_lock = threading.Lock()
_active: list[tuple[float, float, str]] = []  # (deadline on perf_counter, seconds, what)


def stage_budget_s(planned_requests: int | None) -> float:
    """One stage's budget: `SUITE_STAGE_BUDGET_S` if set, else from its planned requests."""
    raw = os.environ.get(BUDGET_ENV, "").strip()
    if raw:
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{BUDGET_ENV}={raw!r}: not a positive number of seconds")
        return value
    if planned_requests is None:
        return UNPLANNED_S
    return max(STAGE_MIN_S, planned_requests * PER_REQUEST_S)


@contextlib.contextmanager
def budget(seconds: float, what: str) -> Iterator[None]:
    """Every request sent meanwhile (any client, any thread) ends by `seconds` from now."""
    entry = (time.perf_counter() + seconds, seconds, what)
    with _lock:
        _active.append(entry)
    try:
        yield
    finally:
        with _lock:
            _active.remove(entry)


def time_left(where: str) -> tuple[float, str] | None:
    """(seconds left, what the budget is) of the earliest deadline, None without a budget;
    a `ClientError` naming `where` and the budget once it is spent."""
    with _lock:
        if not _active:
            return None
        deadline, seconds, what = min(_active)
    left = deadline - time.perf_counter()
    if left <= 0:
        raise ClientError(f"{where}: {what}: its time budget of {seconds:g} s is spent")
    return left, f"{what}: its time budget of {seconds:g} s"


def request_window(where: str, timeout_s: float) -> tuple[float, str]:
    """How long one request may take (the client's `timeout_s`, or less where a budget ends
    sooner) and what to say when that time is up."""
    within = time_left(where)
    if within is not None and within[0] < timeout_s:
        return within[0], f"{where}: {within[1]} is spent"
    return timeout_s, f"{where}: no end of the reply after {timeout_s:g} s"

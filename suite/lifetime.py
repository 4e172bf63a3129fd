"""No runtime outlives the suite: one process-wide registry of the runtimes this process started.

Launchers add each runtime they start (`REGISTRY.add(rt)`: anything with `kill()`) and discard
it once it is stopped, and may add one cleanup of their own (`REGISTRY.on_exit(fn)`: the Docker
launcher removes the containers labelled with this session). The registry stops them all at
interpreter exit and, once its signal handlers are installed (from the main thread, by the CLI or
a launcher's first start), on SIGINT, SIGTERM, SIGHUP and SIGQUIT, before the handler that was
there before it runs. Where there was none, the signal then does what it does by default: it is
raised again with its default disposition (SIGTERM ends the process as SIGTERM, so a test runner
or any other host program stops instead of taking an exception for one failure and going on);
SIGINT stays a KeyboardInterrupt. A signal the process ignored is left ignored (nohup). A signal
that arrives while a launcher creates and records a runtime (`with REGISTRY.deferred():`) is
delivered right after, so no runtime is started unrecorded.

A kill -9 leaves no path in this process: local runtimes then get the kernel's parent-death
signal, and the next start ends what a gone owner left behind (leases, container labels).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar, overload

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class Killable(Protocol):
    def kill(self) -> None: ...


K = TypeVar("K")


class Registry:
    """The runtimes of this process, and how they are all stopped on every way out."""

    def __init__(self) -> None:
        self._live: set[Any] = set()
        self._cleanups: list[Callable[[], object]] = []
        self._lock = threading.RLock()
        self._critical_depth = 0
        self._pending: list[int] = []
        self._previous: dict[int, Any] = {}
        self._installed = False
        self._pid = os.getpid()

    # -- what is running ---------------------------------------------------------------------------

    def add(self, rt: Killable) -> None:
        with self._lock:
            self._live.add(rt)

    def discard(self, rt: Killable) -> None:
        with self._lock:
            self._live.discard(rt)

    @overload
    def live(self) -> list[Killable]: ...

    @overload
    def live(self, kind: type[K]) -> list[K]: ...

    def live(self, kind: type[Any] | None = None) -> list[Any]:
        """The runtimes not yet stopped (of one class, with `kind`)."""
        with self._lock:
            return [rt for rt in self._live if kind is None or isinstance(rt, kind)]

    def on_exit(self, cleanup: Callable[[], object]) -> None:
        """One more thing to do when everything stops (after the runtimes are killed); added once."""
        with self._lock:
            if cleanup not in self._cleanups:
                self._cleanups.append(cleanup)

    def stop_all(self) -> None:
        """Kill every live runtime, then run the launchers' cleanups (best effort, never raises)."""
        if os.getpid() != self._pid:  # a forked child leaves its parent's runtimes alone
            return
        with self.deferred():
            for rt in self.live():
                try:
                    rt.kill()
                except Exception as exc:  # noqa: BLE001 - on the way out: stop the others anyway
                    log.debug("could not stop %r: %s", rt, exc)
            for cleanup in list(self._cleanups):
                try:
                    cleanup()
                except Exception as exc:  # noqa: BLE001
                    log.debug("cleanup %r failed: %s", cleanup, exc)

    # -- signals -------------------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """SIGINT/SIGTERM/SIGHUP/SIGQUIT stop every runtime, then act as before (main thread only)."""
        if self._installed or threading.current_thread() is not threading.main_thread():
            return
        for signum in SIGNALS:
            previous = signal.getsignal(signum)
            if previous == self._on_signal:
                continue
            if previous is signal.SIG_IGN:
                continue  # an ignored signal stays ignored (a background job, nohup)
            self._previous[signum] = previous if previous not in (signal.SIG_DFL, None) else None
            signal.signal(signum, self._on_signal)
        self._installed = True

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._critical_depth:
            self._pending.append(signum)
            return
        self.stop_all()
        previous = self._previous.get(signum)
        if callable(previous):
            previous(signum, frame)
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt
        else:
            # Everything this process owns is stopped: now the signal's own default (the process
            # ends by it, as its sender meant), not an exception a host program may catch.
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold the signals above while a runtime is created and recorded, then deliver them."""
        with self._lock:
            self._critical_depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._critical_depth -= 1
                pending = self._pending[:1] if self._critical_depth == 0 else []
                if pending:
                    self._pending.clear()
            if pending:
                signal.raise_signal(pending[0])


REGISTRY = Registry()
atexit.register(REGISTRY.stop_all)

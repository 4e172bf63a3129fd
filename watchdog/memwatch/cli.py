"""The standalone command: watch a process tree, a container, or a command it starts.

    python -m memwatch --pid 1234 --host-max-gb 8
    python -m memwatch --container 3f2a... --spill-gb 1.5
    python -m memwatch --device-max-gb 70 -- python serve.py --port 8000

It watches until the target exits (or ``--duration`` seconds pass, or Ctrl-C), prints the report
as JSON on stdout (or writes it to ``--output``), and exits 0, or 3 when the watchdog tripped and
stopped the target. A bad argument is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import psutil
from pydantic import ValidationError

from memwatch.cgroup import CgroupProbe
from memwatch.monitor import Watchdog
from memwatch.nvml import NvmlProbe
from memwatch.policy import Policy
from memwatch.probe import Probe
from memwatch.process_tree import ProcessTreeProbe
from memwatch.report import WatchdogReport
from memwatch.targets import ContainerTarget, ProcessGroupTarget, ProcessTreeTarget
from memwatch.windows import WindowsSharedGpuProbe

log = logging.getLogger(__name__)

EXIT_TRIPPED = 3
EXIT_USAGE = 2


class UsageError(Exception):
    """A bad argument: reported as one line."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="memwatch",
        description="Watch a runtime's memory and stop it when it overruns (exit 3 on a trip).",
        usage="%(prog)s [options] (--pid N | --container ID | -- CMD [ARGS...])",
    )
    target = p.add_mutually_exclusive_group()
    target.add_argument("--pid", type=int, help="watch this process and its descendants")
    target.add_argument("--container", help="watch this Docker container (id or name)")
    d = Policy()
    p.add_argument("--spill-gb", type=float, default=d.spill_gb,
                   help="spilled/shared memory above baseline, GiB (default %(default)s; 0 = off)")
    p.add_argument("--device-max-gb", type=float, default=None, help="device memory ceiling per GPU, GiB")
    p.add_argument("--device-growth-gb", type=float, default=None,
                   help="device memory growth above baseline, GiB")
    p.add_argument("--host-max-gb", type=float, default=None, help="host memory ceiling, GiB")
    p.add_argument("--interval", type=float, default=d.interval_s, help="seconds between samples")
    p.add_argument("--baseline-delay", type=float, default=0.0,
                   help="take the baseline again after this many seconds (runtime start-up)")
    p.add_argument("--duration", type=float, default=None, help="stop watching after this many seconds")
    p.add_argument("--no-nvml", action="store_true", help="do not probe NVIDIA GPUs")
    p.add_argument("--output", type=Path, help="write the report JSON here instead of stdout")
    p.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    return p


def _policy(args: argparse.Namespace) -> Policy:
    try:
        return Policy(
            spill_gb=args.spill_gb or None,
            device_max_gb=args.device_max_gb,
            device_growth_gb=args.device_growth_gb,
            host_max_gb=args.host_max_gb,
            interval_s=args.interval,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        flag = {"interval_s": "--interval"}.get(str(err["loc"][0]) if err["loc"] else "", None)
        field = flag or ("--" + str(err["loc"][0]).replace("_", "-") if err["loc"] else "policy")
        raise UsageError(f"{field}: {err['msg']} (got {err.get('input')!r})") from None


def watch(
    policy: Policy,
    *,
    pid: int | None = None,
    container: str | None = None,
    command: list[str] | None = None,
    duration_s: float | None = None,
    baseline_delay_s: float = 0.0,
    nvml: bool = True,
) -> WatchdogReport:
    """Watch one target until it exits, trips, or ``duration_s`` passes; return the report."""
    probes: list[Probe] = [NvmlProbe()] if nvml else []
    if command:
        try:
            group = ProcessGroupTarget(command)
        except OSError as exc:
            raise UsageError(f"cannot start {command[0]!r}: {exc.strerror or exc}") from None
        target: ProcessGroupTarget | ProcessTreeTarget | ContainerTarget = group
        probes.append(ProcessTreeProbe(group.pid))
        alive = lambda: group.proc.poll() is None  # noqa: E731
    elif pid is not None:
        if not psutil.pid_exists(pid):
            raise UsageError(f"--pid: no process with pid {pid}")
        target = ProcessTreeTarget(pid)
        probes.append(ProcessTreeProbe(pid))
        alive = lambda: bool(target.pids())  # noqa: E731
    elif container is not None:
        try:
            target = ContainerTarget(container)
        except Exception as exc:
            line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UsageError(f"--container: {container}: {line}") from None
        cg = CgroupProbe(target.container_id, docker_client=target.client)
        target.bind_probe(cg)
        probes.append(cg)
        alive = target.running
    else:
        raise UsageError("nothing to watch: give --pid N, --container ID, or -- CMD ARGS...")
    probes.append(WindowsSharedGpuProbe())

    wd = Watchdog(policy, probes, stop=target.stop, pids=target.pids)
    wd.start()
    started = time.monotonic()
    rebaselined = baseline_delay_s <= 0
    try:
        while alive():
            if wd.wait_tripped(0.05):
                wd.wait_gone(policy.gone_timeout_s)
                time.sleep(3 * policy.interval_s)  # a few samples after the stop, for the timeline
                break
            if not rebaselined and time.monotonic() - started >= baseline_delay_s:
                wd.rebaseline()
                rebaselined = True
            if duration_s is not None and time.monotonic() - started >= duration_s:
                break
    except KeyboardInterrupt:
        log.info("interrupted")
    finally:
        # a command the watchdog started never outlives the watch
        if isinstance(target, ProcessGroupTarget) and target.proc.poll() is None:
            target.stop()
    return wd.stop()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1:]
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="memwatch: %(levelname)s %(message)s", stream=sys.stderr)
    try:
        if command and (args.pid is not None or args.container):
            raise UsageError("give one target: --pid, --container, or -- CMD")
        report = watch(
            _policy(args), pid=args.pid, container=args.container, command=command or None,
            duration_s=args.duration, baseline_delay_s=args.baseline_delay, nvml=not args.no_nvml,
        )
    except UsageError as exc:
        print(f"memwatch: {exc}", file=sys.stderr)
        return EXIT_USAGE
    text = json.dumps(report.model_dump(mode="json"), indent=2)
    if args.output:
        args.output.write_text(text + "\n")
    else:
        print(text)
    print(f"memwatch: {report.summary_line()}", file=sys.stderr)
    return EXIT_TRIPPED if report.tripped else 0

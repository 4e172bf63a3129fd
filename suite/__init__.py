"""suite: a reproducibility-first benchmark suite for LLM inference runtimes.

The flow is catalog -> preflight -> launch (under the memory watchdog) -> gate -> latency ->
extraction -> restarts -> stop -> publish. Each stage is one module; see README.md.
"""

__version__ = "0.1.0"

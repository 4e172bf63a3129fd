"""The suite's kernel overrides for vLLM: a vLLM general plugin (entry-point group
`vllm.general_plugins`, which vLLM 0.24.0's `vllm/plugins/__init__.py` loads in every engine
process at start-up), put on the server's PYTHONPATH by the suite only where a launch's env names
an override in `SUITE_KERNEL_OVERRIDE` (a control with `override` in images/vllm/runtime.toml).

Each override changes exactly one kernel part where vLLM offers no working switch of its own, and
says so in the server's log (`suite kernel override NAME: ...`); the suite then reads the part's
kernels from the same launch's log, as for any control, and a row whose kernels did not change is
reported so, never credited. An override that cannot be applied raises: the server does not start,
and the row is failed with this line, rather than run the kernels it was meant to replace.

- `moe-wna16-triton`: the MoE experts of a compressed-tensors W4A16 checkpoint through vLLM's own
  Triton WNA16 fused-MoE method (`CompressedTensorsWNA16MoEMethod`) instead of Marlin's. In 0.24.0
  `compressed_tensors_moe.py` picks `CompressedTensorsWNA16MarlinMoEMethod` whenever
  `check_moe_marlin_supports_layer` says Marlin can run the layer, and reads `--moe-backend` only
  on ROCm (flydsl); `select_wna16_moe_backend` (oracle/int_wna16.py) never reads it either. So
  `--moe-backend triton` is accepted and ignored there. The override makes that check say no, the
  branch vLLM itself takes for a layer Marlin cannot run.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

log = logging.getLogger("vllm.suite_kernel_override")  # under vLLM's logger: its handler prints it

ENV = "SUITE_KERNEL_OVERRIDE"


def _moe_wna16_triton() -> str:
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
        compressed_tensors_moe as chooser,
    )

    if not hasattr(chooser, "check_moe_marlin_supports_layer"):
        raise RuntimeError("this vLLM's compressed_tensors_moe has no check_moe_marlin_supports_layer: "
                           "the override does not know how this release picks the W4A16 MoE method")

    def never_marlin(layer: object, group_size: int) -> bool:
        return False

    chooser.check_moe_marlin_supports_layer = never_marlin  # type: ignore[attr-defined]
    return ("W4A16 MoE experts through CompressedTensorsWNA16MoEMethod (Triton WNA16 fused MoE), "
            "not CompressedTensorsWNA16MarlinMoEMethod")


OVERRIDES: dict[str, Callable[[], str]] = {"moe-wna16-triton": _moe_wna16_triton}


def register() -> None:
    """vLLM calls this once per process at start-up: apply every override the launch names."""
    for name in [n.strip() for n in os.environ.get(ENV, "").split(",") if n.strip()]:
        apply = OVERRIDES.get(name)
        if apply is None:
            raise RuntimeError(f"suite kernel override {name!r} is unknown (known: {', '.join(OVERRIDES)})")
        what = apply()
        log.info("suite kernel override %s: %s (pid %d)", name, what, os.getpid())

"""llama-cpp-python's OpenAI-compatible server, started the way the suite needs it.

Two additions before `python -m llama_cpp.server` runs with the same arguments:
- llama.cpp's own feature line ("system_info: CPU : SSE3 = 1 | ... | AMX_INT8 = 1 | REPACK = 1 |")
  is printed first, so the run's signature records which CPU kernel paths produced its answers;
- LLAMA_NO_REPACK=1 loads the weights without llama.cpp's extra buffer types (weight repacking
  into CPU-specific layouts), as llama-server's `--no-repack` does: the server has no option for it.
"""

from __future__ import annotations

import os
import runpy
import sys

import llama_cpp.llama_cpp as lib

print("system_info: " + lib.llama_print_system_info().decode(errors="replace").strip(), file=sys.stderr, flush=True)

if os.environ.get("LLAMA_NO_REPACK") == "1":
    _defaults = lib.llama_model_default_params

    def _no_repack() -> "lib.llama_model_params":
        params = _defaults()
        params.use_extra_bufts = False
        return params

    lib.llama_model_default_params = _no_repack
    print("weight repacking off (LLAMA_NO_REPACK=1)", file=sys.stderr, flush=True)

runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)

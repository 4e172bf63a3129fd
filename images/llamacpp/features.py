"""Prints llama.cpp's feature line (`llama_print_system_info`: the CPU kernel paths the libraries in
a folder were built with and choose on this CPU, "CPU : SSE3 = 1 | AVX512 = 1 | REPACK = 1 | ...").

    python3 features.py LIBDIR

llama-server loads the same libraries but logs this line at trace level only.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

lib = ctypes.CDLL(str(Path(sys.argv[1]) / "libllama.so"))
lib.llama_print_system_info.restype = ctypes.c_char_p
print(" ".join(lib.llama_print_system_info().decode(errors="replace").split()).strip(" |"))

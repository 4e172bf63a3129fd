#!/usr/bin/env bash
# Local install recipe for llama-cpp-python's OpenAI-compatible server, in its own venv.
# Usage: install.sh PREFIX   (writes PREFIX/venv and PREFIX/.installed)
set -euo pipefail
PREFIX="$1"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$PREFIX"
[ -x "$PREFIX/venv/bin/python" ] || "$PYTHON" -m venv "$PREFIX/venv"
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$PREFIX/venv/bin/python" -m pip install --quiet \
  "llama-cpp-python[server]==$VERSION"
echo "llama-cpp-python $VERSION" >"$PREFIX/.installed"

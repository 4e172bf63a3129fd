#!/usr/bin/env bash
# Local install recipe for llama.cpp's llama-server, built from a pinned source: the llama.cpp
# tree vendored in the llama-cpp-python sdist of the pinned version (the registries this suite can
# reach carry no other copy of it). The build is shared with llama-cpp-python's recipe (one build
# per release and CPU, under the cache's builds/ folder) and smoke-tested: see build-llama-cpp.sh.
# Usage: install.sh PREFIX   (writes PREFIX/bin/llama-server, PREFIX/lib and PREFIX/.installed)
# SUITE_LLAMA_BUILD=native|portable forces a configuration (default: auto).
set -euo pipefail
PREFIX="$1"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
HERE="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$PREFIX"
BUILDS="${SUITE_LLAMA_BUILDS:-$(cd "$(dirname "$PREFIX")/.." && pwd)/builds}"
bash "$HERE/build-llama-cpp.sh" "$VERSION" "$BUILDS" "${SUITE_LLAMA_BUILD:-auto}" | tee "$PREFIX/build.out"
BUILD="$(tail -n 1 "$PREFIX/build.out")"
rm -rf "$PREFIX/bin" "$PREFIX/lib"
mkdir -p "$PREFIX/bin" "$PREFIX/lib"
cp "$BUILD/bin/llama-server" "$PREFIX/bin/"
cp -a "$BUILD/lib/." "$PREFIX/lib/"
cp "$HERE/features.py" "$PREFIX/features.py"
cp "$BUILD/.built" "$PREFIX/.installed"

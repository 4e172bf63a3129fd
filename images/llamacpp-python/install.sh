#!/usr/bin/env bash
# Local install recipe for llama-cpp-python's OpenAI-compatible server, in its own venv.
# Usage: install.sh PREFIX   (writes PREFIX/venv, PREFIX/serve.py and PREFIX/.installed)
#
# Beside images/llamacpp (a local install), the llama.cpp libraries are not compiled again: the
# Python package is installed without its own build (LLAMA_BUILD=OFF) and takes the libraries of
# the llama.cpp build that llama-server uses (images/llamacpp/build-llama-cpp.sh: one build per
# release and CPU, AMX left out, smoke-tested). Then one completion through the Python bindings;
# a build that fails it is reported with its cause and replaced by the portable build.
# In an image (no images/llamacpp beside it), the package builds its own portable copy.
set -euo pipefail
PREFIX="$1"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
PYTHON="${PYTHON:-python3}"
HERE="$(cd "$(dirname "$0")" && pwd)"
LLAMA="$HERE/../llamacpp"
mkdir -p "$PREFIX"
[ -x "$PREFIX/venv/bin/python" ] || "$PYTHON" -m venv "$PREFIX/venv"
cp "$HERE/serve.py" "$PREFIX/serve.py"
if [ ! -f "$LLAMA/build-llama-cpp.sh" ]; then
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$PREFIX/venv/bin/python" -m pip install --quiet \
    "llama-cpp-python[server]==$VERSION"
  echo "llama-cpp-python $VERSION, portable build (AMX off)" >"$PREFIX/.installed"
  exit 0
fi
BUILDS="${SUITE_LLAMA_BUILDS:-$(cd "$(dirname "$PREFIX")/.." && pwd)/builds}"
bash "$LLAMA/build-llama-cpp.sh" "$VERSION" "$BUILDS" "${SUITE_LLAMA_BUILD:-auto}" | tee "$PREFIX/build.out"
BUILD="$(tail -n 1 "$PREFIX/build.out")"
CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" "$PREFIX/venv/bin/python" -m pip install --quiet \
  "llama-cpp-python[server]==$VERSION"
LIBDIR="$("$PREFIX/venv/bin/python" -c 'import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec("llama_cpp").origin).parent / "lib")')"
use_build() {
  rm -rf "$LIBDIR"
  mkdir -p "$LIBDIR"
  cp -a "$1/lib/." "$LIBDIR/"
  sed 's/^llama\.cpp/llama-cpp-python '"$VERSION"' over llama.cpp/' "$1/.built" >"$PREFIX/.installed.next"
}
use_build "$BUILD"
if [ -n "${SUITE_SMOKE_MODEL:-}" ] && ! out="$("$PYTHON" "$LLAMA/smoke.py" "$SUITE_SMOKE_MODEL" "$PREFIX/smoke.log" --python "$PREFIX/venv/bin/python")"; then
  echo "llama-cpp-python over the build in $BUILD failed its smoke test: ${out#smoke test: failed: }"
  echo "using the portable configuration instead"
  BUILD="$(bash "$LLAMA/build-llama-cpp.sh" "$VERSION" "$BUILDS" portable | tail -n 1)"
  use_build "$BUILD"
  if ! out="$("$PYTHON" "$LLAMA/smoke.py" "$SUITE_SMOKE_MODEL" "$PREFIX/smoke.log" --python "$PREFIX/venv/bin/python")"; then
    echo "error: llama-cpp-python failed its smoke test on the portable build too: ${out#smoke test: failed: }" >&2
    exit 1
  fi
fi
echo "${out:-smoke test: skipped (no model named by SUITE_SMOKE_MODEL)}"
mv "$PREFIX/.installed.next" "$PREFIX/.installed"

#!/usr/bin/env bash
# Local install recipe for llama.cpp's llama-server, built from a pinned source.
# The source is the llama.cpp tree vendored in the llama-cpp-python sdist of the pinned version
# (the registries this suite can reach carry no other copy of it).
# Usage: install.sh PREFIX   (writes PREFIX/bin/llama-server and PREFIX/.installed)
set -euo pipefail
PREFIX="$1"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$PREFIX/src" "$PREFIX/bin"
if [ ! -d "$PREFIX/src/llama_cpp_python-$VERSION" ]; then
  "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: \
    "llama-cpp-python==$VERSION" -d "$PREFIX/src"
  tar -xzf "$PREFIX/src/llama_cpp_python-$VERSION.tar.gz" -C "$PREFIX/src"
fi
SRC="$PREFIX/src/llama_cpp_python-$VERSION/vendor/llama.cpp"
cmake -S "$SRC" -B "$PREFIX/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DGGML_NATIVE=ON \
  -DBUILD_SHARED_LIBS=OFF >"$PREFIX/cmake-configure.log"
cmake --build "$PREFIX/build" --target llama-server -j"$(nproc)" >"$PREFIX/cmake-build.log"
cp "$PREFIX/build/bin/llama-server" "$PREFIX/bin/llama-server"
echo "llama.cpp from llama-cpp-python $VERSION sdist" >"$PREFIX/.installed"

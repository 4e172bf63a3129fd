#!/usr/bin/env bash
# Build llama.cpp once per release and CPU, for both llama.cpp runtimes (llama-server and
# llama-cpp-python's server share these libraries instead of compiling the same sources twice).
# The source is the llama.cpp tree vendored in the llama-cpp-python sdist of the release.
#
# Usage: build-llama-cpp.sh VERSION BUILDS [auto|native|portable]
#   builds into BUILDS/llama.cpp-VERSION-CONFIG-CPUKEY/: bin/llama-server, lib/lib*.so (rpath
#   $ORIGIN/../lib) and .built (the build's configuration); reuses it when present. Prints that
#   folder on its last line.
#   auto (the default): the native build, smoke-tested with one request to its llama-server
#   (on $SUITE_SMOKE_MODEL, a GGUF); a native build that fails it is reported with its cause and
#   the portable one is built, smoke-tested and used instead.
#
# Configurations:
#   native    -march=native with AMX left out (-mno-amx-*): llama.cpp's AMX matmul path
#             (ggml_backend_amx_mul_mat) crashes with SIGSEGV on some AMX CPUs (upstream
#             ggml-org/llama.cpp#20824, closed without a fix); AVX-512 and repacking stay.
#   portable  no -march=native: x86-64-v3 (AVX2, FMA, F16C, BMI2) where the CPU has AVX2,
#             else the compiler's baseline; no AVX-512, no AMX. For images and as the fallback
#             when the native build fails its smoke test.
set -euo pipefail
VERSION="$1"
BUILDS="$2"
CONFIG="${3:-auto}"
PYTHON="${PYTHON:-python3}"
HERE="$(cd "$(dirname "$0")" && pwd)"
if [ "$CONFIG" = auto ]; then
  native="$(bash "$0" "$VERSION" "$BUILDS" native | tail -n 1)"
  if smoke_out="$(bash "$HERE/smoke-server.sh" "$native")"; then
    echo "$smoke_out"
    echo "$native"
    exit 0
  fi
  echo "the native build of llama.cpp $VERSION failed its smoke test on this CPU: ${smoke_out#smoke test: failed: }"
  echo "rebuilding in the portable configuration (no -march=native, no AVX-512, no AMX)"
  portable="$(bash "$0" "$VERSION" "$BUILDS" portable | tail -n 1)"
  if ! smoke_out="$(bash "$HERE/smoke-server.sh" "$portable")"; then
    echo "error: the portable build of llama.cpp $VERSION failed its smoke test too: ${smoke_out#smoke test: failed: }" >&2
    exit 1
  fi
  echo "$smoke_out"
  echo "$portable"
  exit 0
fi
OUT="$BUILDS/llama.cpp-$VERSION-$CONFIG-$(bash "$HERE/cpu-key.sh")"
# The build's own output goes to stderr (the install log); stdout carries only the folder.
exec 3>&1 1>&2
JOBS="$(nproc)"
mkdir -p "$OUT"
exec 9>"$OUT.lock"
flock 9  # the other llama.cpp runtime may be building the same folder
if [ -f "$OUT/.built" ]; then
  echo "llama.cpp $VERSION ($CONFIG) already built in $OUT"
  echo "$OUT" >&3
  exit 0
fi
SRC_ROOT="$BUILDS/src"
mkdir -p "$SRC_ROOT"
if [ ! -d "$SRC_ROOT/llama_cpp_python-$VERSION" ]; then
  "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$SRC_ROOT"
  tar -xzf "$SRC_ROOT/llama_cpp_python-$VERSION.tar.gz" -C "$SRC_ROOT"
fi
SRC="$SRC_ROOT/llama_cpp_python-$VERSION/vendor/llama.cpp"
ARCH=(-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
CFLAGS_EXTRA=""
case "$CONFIG" in
  native)
    ARCH+=(-DGGML_NATIVE=ON)
    # -march=native turns AMX on where the CPU has it; an explicit -mno-* wins over -march.
    CFLAGS_EXTRA="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" ;;
  portable)
    v3=OFF
    grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && v3=ON
    [ "${SUITE_LLAMA_PORTABLE_LEVEL:-}" = "x86-64-v3" ] && v3=ON
    ARCH+=(-DGGML_NATIVE=OFF -DGGML_AVX=$v3 -DGGML_AVX2=$v3 -DGGML_FMA=$v3 -DGGML_F16C=$v3 -DGGML_BMI2=$v3
           -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF) ;;
  *) echo "error: unknown configuration $CONFIG (native|portable)" >&2; exit 2 ;;
esac
echo "configuring llama.cpp $VERSION ($CONFIG) in $OUT/build"
cmake -S "$SRC" -B "$OUT/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
  -DBUILD_SHARED_LIBS=ON -DCMAKE_INSTALL_RPATH='$ORIGIN;$ORIGIN/../lib' -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
  -DCMAKE_C_FLAGS="$CFLAGS_EXTRA" -DCMAKE_CXX_FLAGS="$CFLAGS_EXTRA" "${ARCH[@]}"
# cmake's own percentages ("[ 42%] Building ...") are the progress lines of a long build.
cmake --build "$OUT/build" --target llama-server llama mtmd -j"$JOBS"
mkdir -p "$OUT/bin" "$OUT/lib"
cp "$OUT/build/bin/llama-server" "$OUT/bin/"
find "$OUT/build/bin" -maxdepth 1 -name 'lib*.so*' -exec cp -a {} "$OUT/lib/" \;
rm -rf "$OUT/build"
printf 'llama.cpp from llama-cpp-python %s sdist, %s build (AMX off)\n' "$VERSION" "$CONFIG" >"$OUT/.built"
echo "$OUT" >&3

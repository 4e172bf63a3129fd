#!/usr/bin/env bash
# Build llama.cpp once: the llamacpp image takes the host's portable build instead of compiling the
# same sources again. `suite setup` (run by `make test` with SUITE_LLAMA_BUILD=portable and
# SUITE_LLAMA_PORTABLE_LEVEL=x86-64-v3) leaves it in the suite cache as
# builds/llama.cpp-VERSION-portable-CPUKEY/, built with the flags the image's own build uses
# (GGML_NATIVE off, x86-64-v3, no AVX-512, no AMX: it runs on any x86-64-v3 CPU); this copies it
# into the image's build context (images/llamacpp/prebuilt/, git-ignored), where the Dockerfile's
# recipe finds it built (build-llama-cpp.sh reuses a folder holding .built) and compiles nothing.
# The copy is part of the context, so the image's tag follows it. Where there is no such build (the
# host's is native, another release, a CPU without AVX2/FMA whose portable build is not x86-64-v3),
# the folder is emptied and the image compiles its own, as before.
# Idempotent.  Usage: .ci/llama-build-context.sh [IMAGE_FOLDER]   (default: images/llamacpp)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
IMG="${1:-$HERE/../images/llamacpp}"
CACHE="${SUITE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/suite}"
[ -f "$IMG/Dockerfile" ] || { echo "llama-build-context: $IMG: no Dockerfile" >&2; exit 2; }
VERSION="$(sed -n 's/^ARG LLAMA_CPP_PYTHON_VERSION=//p' "$IMG/Dockerfile")"
[ -n "$VERSION" ] || { echo "llama-build-context: $IMG/Dockerfile names no LLAMA_CPP_PYTHON_VERSION" >&2; exit 2; }
NAME="llama.cpp-$VERSION-portable-$(bash "$IMG/cpu-key.sh")"
BUILD="$CACHE/builds/$NAME"
DEST="$IMG/prebuilt"
rm -rf "$DEST"
if ! grep -qw avx2 /proc/cpuinfo || ! grep -qw fma /proc/cpuinfo; then
  echo "llama-build-context: this CPU lacks AVX2/FMA: its portable build is not the image's x86-64-v3; the image compiles its own"
  exit 0
fi
if [ ! -f "$BUILD/.built" ] || ! grep -q "portable build" "$BUILD/.built"; then
  echo "llama-build-context: no portable build of llama.cpp $VERSION in $CACHE/builds; the image compiles its own"
  exit 0
fi
mkdir -p "$DEST"
cp -a "$BUILD" "$DEST/$NAME"
rm -f "$DEST/$NAME.lock"
echo "llama-build-context: the llamacpp image takes $BUILD ($(du -sh "$DEST/$NAME" | cut -f1)) instead of compiling it"

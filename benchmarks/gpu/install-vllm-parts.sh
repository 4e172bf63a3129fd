#!/usr/bin/env bash
# On the offline GPU machine: put together what prepare-vllm-parts.sh made and install it into a
# target folder (no change to the machine's own Python); with a third folder, install the
# quantisation tools (PARTS_DIR/quantize) there too, apart from vLLM's (they need another
# compressed-tensors). Then use them with:
#   export PYTHONPATH=TARGET VLLM_USE_FLASHINFER_SAMPLER=0 SUITE_QUANTIZE_PYTHONPATH=QUANTIZE_TARGET
#   python3 -m vllm.entrypoints.openai.api_server --model ...
# (FlashInfer is not installed: its sampler must be off; attention uses FlashAttention 3.)
# Usage: install-vllm-parts.sh PARTS_DIR TARGET [QUANTIZE_TARGET]
#        (PARTS_DIR holds deps/, vllm.sha256 and every part; quantize/ for the third argument)
# Every wheel is checked against wheels.sha256 and the vLLM archive against vllm.sha256 before
# anything is installed: a swapped wheel or a torn part installs nothing, and the assembled archive
# never stays behind.
set -euo pipefail
P=${1:?usage: install-vllm-parts.sh PARTS_DIR TARGET [QUANTIZE_TARGET]}
T=${2:?usage: install-vllm-parts.sh PARTS_DIR TARGET [QUANTIZE_TARGET]}
Q=${3:-}
P=$(cd "$P" && pwd)  # the checksum files name files relative to it: a relative PARTS_DIR is made absolute
pipi() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$@"; }
if [ -f "$P/wheels.sha256" ]; then
  (cd "$P" && sha256sum --quiet -c wheels.sha256) || { echo "$P: a wheel does not match wheels.sha256 (swapped or torn): nothing installed"; exit 3; }
else
  echo "$P: no wheels.sha256 (parts made by an older prepare-vllm-parts.sh): the wheels are not checked"
fi
if [ -n "$Q" ] && [ ! -f "$Q/.quantize_ok" ]; then
  ls "$P"/quantize/*.whl >/dev/null 2>&1 || { echo "$P/quantize: no wheels of the quantisation tools"; exit 3; }
  mkdir -p "$Q" && pipi "$Q" "$P"/quantize/*.whl
  PYTHONPATH="$Q${PYTHONPATH:+:$PYTHONPATH}" python3 -c 'import llmcompressor, compressed_tensors, datasets; print("llmcompressor", llmcompressor.__version__, "compressed-tensors", compressed_tensors.__version__, "datasets", datasets.__version__)' \
    || { echo "the quantisation tools do not import (pyarrow older than datasets 5.2 needs?)"; exit 4; }
  touch "$Q/.quantize_ok"
fi
[ -f "$T/.vllm_ok" ] && { echo "vllm already in $T"; exit 0; }
mkdir -p "$T"
# the archive put together and checked first, in a folder of its own that never stays behind
WORK=$(mktemp -d "$(dirname "$T")/.vllm-parts.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cat "$P"/vllm.tar.xz.part-* > "$WORK/vllm.tar.xz"
(cd "$WORK" && sha256sum --quiet -c "$P/vllm.sha256") || { echo "vllm.tar.xz: checksum mismatch (a part is missing or torn): nothing installed"; exit 3; }
pipi "$T" "$P"/deps/*.whl
tar -xJf "$WORK/vllm.tar.xz" -C "$T"
PYTHONPATH="$T" python3 -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)'
touch "$T/.vllm_ok"

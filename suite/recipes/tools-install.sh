#!/usr/bin/env bash
# Install the model-preparation tools (torch CPU, transformers, gguf, peft) into their own venv.
# They derive the HF checkpoint from the GGUF and make the test LoRA adapter; the suite's own
# environment never imports them.  Usage: tools-install.sh PREFIX
set -euo pipefail
PREFIX="$1"
PYTHON="${PYTHON:-python3}"
mkdir -p "$PREFIX"
[ -x "$PREFIX/venv/bin/python" ] || "$PYTHON" -m venv "$PREFIX/venv"
"$PREFIX/venv/bin/python" -m pip install --quiet "torch==2.13.0"
"$PREFIX/venv/bin/python" -m pip install --quiet "transformers==5.23.0" "gguf==0.19.0" \
  "accelerate==1.15.0" "peft==0.21.2" "sentencepiece" "protobuf"
echo "tools" >"$PREFIX/.installed"

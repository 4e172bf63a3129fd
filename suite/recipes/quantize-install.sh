#!/usr/bin/env bash
# Install the quantisation tools (llmcompressor and what it imports beyond the model-preparation
# tools' torch and transformers) into their own folder, for suite/recipes/quantize.py: a folder, not
# the tools venv, since llmcompressor pins compressed-tensors and transformers releases of its own.
# Every wheel pinned, none of their requirements resolved (--no-deps): the list is what it imports.
# Usage: quantize-install.sh PYTHON PREFIX
set -euo pipefail
PYTHON="$1"; PREFIX="$2"
mkdir -p "$PREFIX"
"$PYTHON" -m pip install --quiet --no-deps --target "$PREFIX" \
  "llmcompressor==0.14.0.1" "compressed-tensors==0.19.0" "loguru==0.7.3" "datasets==5.2.0" "dill==0.4.1" \
  "multiprocess==0.70.19" "pyarrow==26.0.1" "pandas==3.1.1" "python-dateutil==2.9.0.post0" "tzdata==2026.6" \
  "xxhash==3.6.0" "fsspec==2026.9.0" "pyyaml==6.0.3"
PYTHONPATH="$PREFIX" "$PYTHON" -c "import llmcompressor, compressed_tensors, datasets"
echo "quantize" >"$PREFIX/.installed"

#!/usr/bin/env bash
# One-request smoke test of the llama-server in a build folder, on $SUITE_SMOKE_MODEL (a GGUF).
# Usage: smoke-server.sh BUILD_DIR   (prints one "smoke test: ..." line; exit 1 when it failed)
set -uo pipefail
BUILD="$1"
HERE="$(cd "$(dirname "$0")" && pwd)"
if [ -z "${SUITE_SMOKE_MODEL:-}" ]; then
  echo "smoke test: skipped (no model named by SUITE_SMOKE_MODEL)"
  exit 0
fi
"${PYTHON:-python3}" "$HERE/smoke.py" "$SUITE_SMOKE_MODEL" "$BUILD/smoke.log" -- \
  "$BUILD/bin/llama-server" --model '{model}' --host 127.0.0.1 --port '{port}' --ctx-size 512 --threads 2 --seed 42

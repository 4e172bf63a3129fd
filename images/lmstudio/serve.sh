#!/usr/bin/env bash
# Start LM Studio headless and serve one model with the OpenAI-compatible API.
# Usage: serve.sh --model FILE.gguf --identifier NAME --port PORT --context-length N --seed S [--gpu RATIO]
# The model is linked (not copied) into LM Studio's models folder, loaded with its seed and
# context length through the SDK (so the API never loads it with other settings), then the HTTP
# server starts: the ready endpoint answers only once the model is loaded.
set -euo pipefail
MODEL="" IDENTIFIER="model" PORT=1234 CONTEXT=4096 SEED=42 GPU="max"
while [ $# -gt 0 ]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --identifier) IDENTIFIER="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    --context-length) CONTEXT="$2"; shift 2 ;;
    --seed) SEED="$2"; shift 2 ;;
    --gpu) GPU="$2"; shift 2 ;;
    *) echo "serve.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done
if [ ! -f "$MODEL" ]; then echo "serve.sh: error: model file not found: $MODEL" >&2; exit 2; fi

# `lms version` names the CLI's commit; `lms daemon up --json` prints llmster's own version
# ({"status":"running","pid":...,"isDaemon":true,"version":"..."}).
echo "lms version: $(lms version 2>&1 | tr '\n' ' ')"
DAEMON="$(lms daemon up --json)"
echo "llmster: $DAEMON"
TARGET="$HOME/.lmstudio/models/suite/local"
mkdir -p "$TARGET"
ln -sf "$MODEL" "$TARGET/$(basename "$MODEL")"
/opt/lmsdk/bin/python /opt/suite/load_model.py --file "$(basename "$MODEL")" --identifier "$IDENTIFIER" \
  --context-length "$CONTEXT" --seed "$SEED" --gpu "$GPU"
lms server start --port "$PORT" --bind 0.0.0.0
echo "serving $IDENTIFIER on port $PORT"
# Keep the container alive while the server answers; stream the server's log meanwhile.
# `lms server status` exits 0 whether or not the server runs: its JSON form says which
# ({"running":true,"port":1234}).
lms log stream --source server &
while lms server status --json 2>/dev/null | grep -q '"running":true'; do sleep 5; done
echo "serve.sh: error: the LM Studio server stopped" >&2
exit 1

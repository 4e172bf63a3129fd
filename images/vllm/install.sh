#!/usr/bin/env bash
# Local install recipe for vLLM on NVIDIA GPUs, in its own venv (vLLM pins its own torch).
# Usage: install.sh PREFIX   (writes PREFIX/venv and PREFIX/.installed)
#   VLLM_VERSION      the release (the arm's `version`, else the definition's default)
#   SUITE_WHEELHOUSE  a folder of wheels: install from it alone (pip --no-index --find-links), into a
#                     venv that also sees the machine's own packages (its torch, CUDA libraries)
#   PYTHON            the interpreter the venv is made from (default python3)
# An existing environment (SUITE_VLLM_PYTHON) needs no install: the suite checks its version.
set -euo pipefail
PREFIX="$1"
VERSION="${VLLM_VERSION:-0.32.0}"
PYTHON="${PYTHON:-python3}"
WHEELHOUSE="${SUITE_WHEELHOUSE:-}"
mkdir -p "$PREFIX"
if [ -n "$WHEELHOUSE" ]; then
  if [ ! -d "$WHEELHOUSE" ]; then
    echo "error: SUITE_WHEELHOUSE=$WHEELHOUSE is not a folder" >&2
    exit 2
  fi
  shopt -s nullglob
  wheels=("$WHEELHOUSE"/vllm-"$VERSION"-*.whl "$WHEELHOUSE"/vllm-"$VERSION"+*.whl)
  if [ ${#wheels[@]} -eq 0 ]; then
    found=$(find "$WHEELHOUSE" -maxdepth 1 -name 'vllm-*.whl' -printf '%f\n' | sed 's/^vllm-\([^-]*\)-.*/\1/' | sort -u | paste -sd, -)
    echo "error: the wheelhouse $WHEELHOUSE has no vllm $VERSION wheel (vllm wheels there: ${found:-none})" >&2
    exit 2
  fi
  [ -x "$PREFIX/venv/bin/python" ] || "$PYTHON" -m venv --system-site-packages "$PREFIX/venv"
  "$PREFIX/venv/bin/python" -m pip install --quiet --no-index --find-links "$WHEELHOUSE" "vllm==$VERSION"
  source="from the wheelhouse $WHEELHOUSE"
else
  [ -x "$PREFIX/venv/bin/python" ] || "$PYTHON" -m venv "$PREFIX/venv"
  "$PREFIX/venv/bin/python" -m pip install --quiet "vllm==$VERSION"
  source="from the package index"
fi
got=$("$PREFIX/venv/bin/python" -c 'import vllm; print(vllm.__version__)')
case "$got" in
  "$VERSION"|"$VERSION"+*) ;;
  *) echo "error: the venv has vllm $got, not $VERSION" >&2; exit 2 ;;
esac
echo "vllm $VERSION $source" >"$PREFIX/.installed"

#!/usr/bin/env bash
# Split what the GPU machine needs into parts that each fit one call beside the checkout (a call
# carries at most 64 MiB, the checkout included). Packs only what it is asked to:
#   vllm   the vLLM archive in .gpu/vllm (made by prepare-vllm-parts.sh; its checksum is kept and
#          checked), the wheels in .gpu/vllm/deps (and quantize/) riding with the first part
#   gemma  the tiny model's GGUF folder (from the suite cache) in .gpu/gemma
#
#     bash benchmarks/gpu/split_parts.sh vllm          # then: run_vllm_studies.sh deps, part ab, part ac, ...
#     bash benchmarks/gpu/split_parts.sh vllm gemma
#
#     RESUME_RUN=MODEL/ARM/RUN bash benchmarks/gpu/split_parts.sh vllm   # and that run for resume-matrix
#
# The phases need nothing from docs/: the example records they start from (the CPU arm `tiny`
# compares with; the run `resume-matrix` takes up, named by RESUME_RUN) are copied here into
# .gpu/records, which travels in place of docs/ (a checkout without docs/, sparse, is lighter).
# The checkout is measured as it is: the tracked files present in this work tree (docs/ left out
# where the checkout leaves it out), with .gpu/records beside them.
# Prints each call's size. Run it again whenever the checkout has grown.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: split_parts.sh vllm|gemma ... (what to pack)"; exit 2; }
for what in "$@"; do
  case "$what" in vllm|gemma) ;; *) echo "split_parts.sh: $what: not one of vllm, gemma"; exit 2;; esac
done
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"
MIB=$((1024 * 1024))
REC=.gpu/records
if [ -d docs/examples ]; then
  rm -rf "$REC" && mkdir -p "$REC/cpu-results/tiny"
  cp -r docs/examples/cpu-results/tiny/vllm-cpu "$REC/cpu-results/tiny/"
  if [ -n "${RESUME_RUN:-}" ]; then
    [ -d "docs/examples/gpu-vllm-results/$RESUME_RUN" ] || { echo "RESUME_RUN=$RESUME_RUN: no such run under docs/examples/gpu-vllm-results"; exit 2; }
    mkdir -p "$REC/gpu-vllm-results/$(dirname "$RESUME_RUN")"
    cp -r "docs/examples/gpu-vllm-results/$RESUME_RUN" "$REC/gpu-vllm-results/$(dirname "$RESUME_RUN")/"
  fi
fi
# tracked files missing from the work tree (a sparse checkout) do not travel: du skips them
tracked=$( (git ls-files -z | du -c --files0-from=- -b 2>/dev/null || true) | tail -1 | cut -f1)
records=$( (du -sb "$REC" 2>/dev/null || echo 0) | cut -f1)
checkout=$(( tracked + records ))
room=$(( 64 * MIB - checkout - 2 * MIB ))   # 2 MiB to spare for what changes before the call
[ "$room" -gt "$MIB" ] || { echo "the checkout ($((checkout / MIB)) MiB) leaves no room beside it"; exit 1; }
echo "checkout $((checkout / MIB)) MiB; each call at most $(( (checkout + room) / MIB )) MiB"
for what in "$@"; do
  if [ "$what" = vllm ]; then
    V=.gpu/vllm
    ls "$V"/vllm.tar.xz.part-* >/dev/null 2>&1 || { echo "$V: no parts (run benchmarks/gpu/prepare-vllm-parts.sh $V first)"; exit 3; }
    riders=$(du -sb "$V/deps" | cut -f1)
    [ -d "$V/quantize" ] && riders=$(( riders + $(du -sb "$V/quantize" | cut -f1) ))
    first=$(( room - riders ))
    [ "$first" -gt $MIB ] || { echo "the checkout ($((checkout / MIB)) MiB) leaves no room for the wheels"; exit 1; }
    # the archive put together in a folder of its own, removed however this ends (a torn part too)
    WORK=$(mktemp -d /tmp/split-parts.XXXXXX)
    trap 'rm -rf "$WORK"' EXIT
    cat "$V"/vllm.tar.xz.part-* > "$WORK/vllm.tar.xz"
    (cd "$WORK" && sha256sum --quiet -c "$REPO/$V/vllm.sha256") || { echo "$V: the parts do not make vllm.tar.xz"; exit 3; }
    rm -f "$V"/vllm.tar.xz.part-*
    head -c "$first" "$WORK/vllm.tar.xz" > "$V/vllm.tar.xz.part-aa"
    size=$(stat -c %s "$WORK/vllm.tar.xz")
    if [ "$size" -gt "$first" ]; then  # an archive that fits the first call makes one part alone
      tail -c +$(( first + 1 )) "$WORK/vllm.tar.xz" | split -b "$room" -a 1 - "$V/vllm.tar.xz.rest-"
      for f in "$V"/vllm.tar.xz.rest-*; do  # rest-a, rest-b ... -> part-ab, part-ac ...
        letter=${f##*-}; next=$(printf "\\$(printf '%03o' $(( $(printf '%d' "'$letter") + 1 )))")
        mv "$f" "$V/vllm.tar.xz.part-a$next"
      done
    fi
    rm -rf "$WORK"
    echo "vllm: part aa with deps/$( [ -d "$V/quantize" ] && echo ' and quantize/') ($(( (first + riders) / MIB )) MiB), then:"
    ls -la "$V" | grep part-
  else
    GGUF=${SUITE_CACHE:-$HOME/.cache/suite}/models/tiny/gguf
    [ -f "$GGUF/.prepared" ] || { echo "gemma: $GGUF is not prepared (suite setup --model tiny)"; exit 3; }
    mkdir -p .gpu/gemma && rm -f .gpu/gemma/gguf.tar.part-*
    (cd "$(dirname "$GGUF")" && tar -cf - gguf) | split -b "$room" -a 1 - .gpu/gemma/gguf.tar.part-
    (cd "$(dirname "$GGUF")" && tar -cf - gguf | sha256sum | sed 's/-$/gguf.tar/') > .gpu/gemma/gguf.tar.sha256
    echo "gemma:"; ls -la .gpu/gemma | grep part-
  fi
done

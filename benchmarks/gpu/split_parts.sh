#!/usr/bin/env bash
# Split what the GPU machine needs into parts that each fit one call beside the checkout (a call
# carries at most 64 MiB, the checkout included): the vLLM archive in .gpu/vllm (made by
# prepare-vllm-parts.sh; its checksum is kept and checked) with the wheels in .gpu/vllm/deps riding
# with the first part, and the tiny model's GGUF folder (from the suite cache) in .gpu/gemma.
#
#     bash benchmarks/gpu/split_parts.sh        # then: run_vllm_studies.sh deps, part ab, part ac, ...
#
#     RESUME_RUN=MODEL/ARM/RUN bash benchmarks/gpu/split_parts.sh   # and that run for resume-matrix
#
# The phases need nothing from docs/: the example records they start from (the CPU arm `tiny`
# compares with; the run `resume-matrix` takes up, named by RESUME_RUN) are copied here into
# .gpu/records, which travels in place of docs/ (a checkout without docs/, sparse, is lighter).
# The checkout is measured as it is: the tracked files present in this work tree (docs/ left out
# where the checkout leaves it out), with .gpu/records beside them.
# Prints each call's size. Run it again whenever the checkout has grown.
set -euo pipefail
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
checkout=$( (git ls-files -z | du -c --files0-from=- -b 2>/dev/null || true) | tail -1 | cut -f1)
records=$( (du -sb "$REC" 2>/dev/null || echo 0) | cut -f1)
room=$(( 64 * MIB - checkout - records - 2 * MIB ))   # 2 MiB to spare for what changes before the call
deps=$(du -sb .gpu/vllm/deps | cut -f1)
first=$(( room - deps ))
[ "$first" -gt $MIB ] || { echo "the checkout ($((checkout / MIB)) MiB) leaves no room for the wheels"; exit 1; }
V=.gpu/vllm
cat "$V"/vllm.tar.xz.part-* > /tmp/vllm.tar.xz
(cd /tmp && sha256sum -c "$REPO/$V/vllm.sha256" >/dev/null) || { echo "$V: the parts do not make vllm.tar.xz"; exit 3; }
rm -f "$V"/vllm.tar.xz.part-*
head -c "$first" /tmp/vllm.tar.xz > "$V/vllm.tar.xz.part-aa"
tail -c +$(( first + 1 )) /tmp/vllm.tar.xz | split -b "$room" -a 1 - "$V/vllm.tar.xz.rest-"
for f in "$V"/vllm.tar.xz.rest-*; do  # rest-a, rest-b ... -> part-ab, part-ac ...
  letter=${f##*-}; next=$(printf "\\$(printf '%03o' $(( $(printf '%d' "'$letter") + 1 )))")
  mv "$f" "$V/vllm.tar.xz.part-a$next"
done
rm -f /tmp/vllm.tar.xz
GGUF=${SUITE_CACHE:-$HOME/.cache/suite}/models/tiny/gguf
if [ -f "$GGUF/.prepared" ]; then
  mkdir -p .gpu/gemma && rm -f .gpu/gemma/gguf.tar.part-*
  (cd "$(dirname "$GGUF")" && tar -cf - gguf) | split -b "$room" -a 1 - .gpu/gemma/gguf.tar.part-
  (cd "$(dirname "$GGUF")" && tar -cf - gguf | sha256sum | sed 's/-$/gguf.tar/') > .gpu/gemma/gguf.tar.sha256
fi
echo "checkout $((checkout / MIB)) MiB, records $((records / 1024)) KiB; each call at most $(( (checkout + records + room) / MIB )) MiB"
ls -la "$V" .gpu/gemma 2>/dev/null | grep part-

#!/usr/bin/env bash
# Prints a short key for this CPU's instruction-set flags: a native build is only valid on a CPU
# with the same flags, so the build folder carries it (a machine whose CPU changed rebuilds).
grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' \
  | grep -E '^(sse|ssse|avx|amx|fma|f16c|bmi|vnni|avx512|movbe|popcnt)' | sort | sha256sum | cut -c1-12

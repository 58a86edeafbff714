#!/usr/bin/env bash
# End-to-end throughput of `selq quantize` on page-cached input, as a ratio to
# `cp` of the same files in the same run (output on tmpfs so the disk is not
# the limit). Usage: [RECIPES="r1 r2"] bench/e2e_vs_cp.sh [selq-binary] [synth args...]
set -euo pipefail
SELQ="${1:-build/release/src/selq}"; shift || true
SYNTH_ARGS=("${@:---arch dspark --layers 2 --vocab 32000}")
WORK="$(mktemp -d /dev/shm/selq-bench.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
# shellcheck disable=SC2068
"$SELQ" synth ${SYNTH_ARGS[@]} "$WORK/src" >/dev/null
cat "$WORK"/src/* > /dev/null  # page cache (it is tmpfs anyway)
bytes=$(du -sb "$WORK/src" | cut -f1)
t0=$(date +%s.%N); cp -r "$WORK/src" "$WORK/cp"; t1=$(date +%s.%N)
for recipe in ${RECIPES:-dspark-oproj-mxfp4}; do
  rm -rf "$WORK/out"
  s0=$(date +%s.%N)
  "$SELQ" quantize "$WORK/src" "$WORK/out" --recipe "recipes/$recipe.yaml" --quiet
  s1=$(date +%s.%N)
  python3 - "$bytes" "$t0" "$t1" "$s0" "$s1" "$recipe" <<'PY'
import sys
b, t0, t1, s0, s1, name = int(sys.argv[1]), *map(float, sys.argv[2:6]), sys.argv[6]
cp, q = t1 - t0, s1 - s0
print(f"{name:24s} {b/1e9:6.2f} GB  cp {cp:6.2f}s ({b/cp/1e9:5.2f} GB/s)  selq {q:6.2f}s ({b/q/1e9:5.2f} GB/s)  selq/cp speed {cp/q:5.2f}")
PY
done

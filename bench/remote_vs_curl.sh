#!/usr/bin/env bash
# Quantizing from an HTTP(S) source against curl downloading the same shards
# with the same number of connections (selq: one keep-alive connection per
# worker thread), interleaved in rounds; the local-source run as a reference.
# Usage: BASE=http://127.0.0.1:PORT/model LOCAL=/dev/shm/www/model [RECIPE=...] [REPEATS=3]
#        bench/remote_vs_curl.sh build/release/src/selq
set -euo pipefail
SELQ=$(realpath "$1")
RECIPE=${RECIPE:-bench/peers/recipes/nvfp4a16.yaml}
REPEATS=${REPEATS:-3}
OUT=${OUT:-/dev/shm/selq-remote-bench-out}
mapfile -t SHARDS < <(python3 -c "import json,sys; print('\n'.join(sorted(set(json.load(open(sys.argv[1]))['weight_map'].values()))))" "$LOCAL/model.safetensors.index.json")
BYTES=$(cd "$LOCAL" && du -cb "${SHARDS[@]}" | tail -1 | cut -f1)
timed() {  # label, command...
  local label=$1; shift
  rm -rf "$OUT" "$OUT.selq-partial"
  local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N)
  printf '%-18s %6.2f s  %6.0f MB/s of source  load %s\n' "$label" "$(echo "$t1 - $t0" | bc)" \
    "$(echo "$BYTES / ($t1 - $t0) / 1000000" | bc -l)" "$(cut -d' ' -f1 /proc/loadavg)"
}
curl_all() {  # connections
  local args=()
  for s in "${SHARDS[@]}"; do args+=(-o /dev/null "$BASE/$s"); done
  curl -sS --no-progress-meter --fail --parallel --parallel-max "$1" "${args[@]}"
}
cases() {
  for j in 1 2; do
    timed "curl x$j" curl_all "$j"
    timed "selq remote -j $j" "$SELQ" quantize "$BASE" "$OUT" --recipe "$RECIPE" -j "$j" --quiet
  done
  timed "selq local -j 2" "$SELQ" quantize "$LOCAL" "$OUT" --recipe "$RECIPE" -j 2 --quiet
}
echo "source: $BASE, $BYTES bytes in ${#SHARDS[@]} shards"
cases >/dev/null  # warm-up
for r in $(seq "$REPEATS"); do echo "round $r"; cases; done
rm -rf "$OUT"

#!/usr/bin/env bash
# Quantizing from an HTTP(S) source against curl downloading the same shards
# with the same number of connections (selq: `-j N` downloads on N keep-alive
# connections), interleaved in rounds; a BASELINE binary's remote runs and
# the local-source run (the compute ceiling) in the same rounds. Each line
# gives the load average before the run and its CPU seconds (user+sys).
# Usage: BASE=http://127.0.0.1:PORT/model LOCAL=/dev/shm/www/model [RECIPE=...] [REPEATS=3]
#        [BASELINE=old-selq] [JOBS="1 2"] bench/remote_vs_curl.sh build/release/src/selq
set -euo pipefail
SELQ=$(realpath "$1")
RECIPE=${RECIPE:-bench/peers/recipes/nvfp4a16.yaml}
REPEATS=${REPEATS:-3}
JOBS=${JOBS:-1 2}
OUT=${OUT:-/dev/shm/selq-remote-bench-out}
mapfile -t SHARDS < <(python3 -c "import json,sys; print('\n'.join(sorted(set(json.load(open(sys.argv[1]))['weight_map'].values()))))" "$LOCAL/model.safetensors.index.json")
BYTES=$(cd "$LOCAL" && du -cb "${SHARDS[@]}" | tail -1 | cut -f1)
TIMEFORMAT='%R %U %S'
timed() {  # label, command...
  local label=$1; shift
  rm -rf "$OUT" "$OUT.selq-partial" "$OUT.cpu"
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  { time "$@" >/dev/null; } 2>"$OUT.cpu"
  local wall cpu; read -r wall cpu < <(awk '{printf "%s %.2f\n", $1, $2 + $3}' "$OUT.cpu")
  printf '%-21s %6.2f s  %6.0f MB/s of source  load %-5s cpu %s s\n' "$label" "$wall" \
    "$(echo "$BYTES / $wall / 1000000" | bc -l)" "$load" "$cpu"
}
curl_all() {  # connections
  local args=()
  for s in "${SHARDS[@]}"; do args+=(-o /dev/null "$BASE/$s"); done
  curl -sS --no-progress-meter --fail --parallel --parallel-max "$1" "${args[@]}"
}
cases() {
  for j in $JOBS; do
    timed "curl x$j" curl_all "$j"
    timed "selq remote -j $j" "$SELQ" quantize "$BASE" "$OUT" --recipe "$RECIPE" -j "$j" --quiet
    [[ -n "${BASELINE:-}" ]] && timed "baseline remote -j $j" "$BASELINE" quantize "$BASE" "$OUT" --recipe "$RECIPE" -j "$j" --quiet
    timed "selq local -j $j" "$SELQ" quantize "$LOCAL" "$OUT" --recipe "$RECIPE" -j "$j" --quiet
  done
}
echo "source: $BASE, $BYTES bytes in ${#SHARDS[@]} shards"
cases >/dev/null  # warm-up
for r in $(seq "$REPEATS"); do echo "round $r"; cases; done
rm -rf "$OUT" "$OUT.cpu"

#!/usr/bin/env bash
# The `mse` search's time against nearest's (docs/BENCHMARKS.md, "Rounding
# `mse` against `nearest`"): each recipe quantized with nearest, then mse by a
# previous build (PREV, optional) and by this one, in the same rounds, wall and
# user seconds and peak RSS from /usr/bin/time. The source stays in the page
# cache; each output is deleted before the next run.
#   selq synth --arch dspark --layers 4 --vocab 32000 /tmp/big     # 5.21 GB
#   PREV=/work/prev/build/release/src/selq bench/rounding/speed.sh /tmp/big /tmp/out [ROUNDS]
set -euo pipefail
SRC=$1 OUT=$2 ROUNDS=${3:-2}
S=$(realpath "${SELQ:-build/release/src/selq}")
HERE=$(cd "$(dirname "$0")" && pwd)
THREADS=${THREADS:-2}
run() {  # label binary recipe rounding
  rm -rf "$OUT"
  /usr/bin/time -f "%e %U %S %M" -o /tmp/speed-time.txt "$2" quantize "$SRC" "$OUT" --recipe "$3" --rounding "$4" \
    -j "$THREADS" -q > /dev/null
  read -r wall user sys rss < /tmp/speed-time.txt
  printf '%-14s %-8s %-8s wall %6.2f s  user %6.2f s  sys %5.2f s  peak %4d MB\n' "$(basename "$3" .yaml)" "$1" "$4" \
    "$wall" "$user" "$sys" $((rss / 1024))
}
cat "$SRC"/*.safetensors > /dev/null  # into the page cache
for round in $(seq "$ROUNDS"); do
  echo "round $round"
  for r in "$HERE/../peers/recipes/nvfp4a16.yaml" "$HERE/recipes/mxfp4-w4a16.yaml" "$HERE/recipes/int4-g128-w4a16.yaml"; do
    run this "$S" "$r" nearest
    [ -n "${PREV:-}" ] && run prev "$PREV" "$r" mse
    run this "$S" "$r" mse
  done
done
rm -rf "$OUT"

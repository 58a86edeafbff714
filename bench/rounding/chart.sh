#!/usr/bin/env bash
# The rounding chart of docs/QUALITY.md ("Every rounding, one chart"): one base,
# three W4A16 formats, each with nearest, mse, weighted and gptq, evaluated in one
# `selq eval` on held-out WikiText-2 (4096 tokens, windows of 256), then summarised
# (chart.py: a table and the chart's JSON) and drawn (selq chart).
#   bench/rounding/chart.sh BASE WORKDIR [WIKITEXT]   # ~8 min on 2 cores (SmolLM2)
# BASE: a Llama-family checkpoint whose widths 64 divides (INT4 is group 64).
set -euo pipefail
BASE=$1 W=$2 TEXT=${3:-$(dirname "$0")/../../../shared/data/wikitext2-test.txt}
S=$(realpath "${SELQ:-build/release/src/selq}")
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$W"
[ -f "$W/calib.json" ] || $S calibrate "$BASE" -o "$W/calib.json" > /dev/null
MODELS=()
for f in nvfp4:llama-nvfp4 mxfp4:"$HERE/recipes/mxfp4-w4a16.yaml" int4-g64:"$HERE/recipes/int4-g64-w4a16.yaml"; do
  for r in nearest mse weighted gptq; do
    m=q-${f%%:*}-$r
    MODELS+=("$m")
    [ -f "$W/$m/selq-manifest.json" ] && continue
    $S quantize "$BASE" "$W/$m" --recipe "${f#*:}" --rounding $r --calibration "$W/calib.json" -q
  done
done
head -c 40000 "$TEXT" > "$W/wiki40k.txt"
(cd "$W" && $S eval "$BASE" "${MODELS[@]}" --text wiki40k.txt --max-tokens 4096 --context 256 --max-prompts 0 \
  --json -q > eval.json)
python3 "$HERE/chart.py" "$W/eval.json" "$W/chart.json" > "$W/summary.md"
$S chart "$W/chart.json" -o "$W/rounding.svg"
cat "$W/summary.md"
echo "picture: $W/rounding.svg"

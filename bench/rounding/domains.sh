#!/usr/bin/env bash
# Every 4-bit W4A16 format with nearest, mse and gptq (the default calibration mix, or
# CALIB=... a --calibration-text list), evaluated on held-out domains the calibration never
# saw (docs/QUALITY.md, "Rounding on held-out domains"): FOLDOC (encyclopedia), libstdc++
# (C++), Melville's Moby-Dick (prose by another author), and WikiText-2 where ../shared/data
# has it. One `selq eval` per domain, so the paired differences are on the same windows;
# then a table of KL ratios to nearest's with the paired 95% intervals (domains.py).
#   bench/rounding/domains.sh BASE WORKDIR [TOKENS]       # ~20 min on 2 cores for SmolLM2
# FORMATS="mxfp4" (a subset of nvfp4 mxfp4 int4-g64) for fewer models.
# BASE: a Llama-family checkpoint whose widths 64 divides (INT4 is group 64).
set -euo pipefail
BASE=$1 W=$2 TOKENS=${3:-2048}
S=$(realpath "${SELQ:-build/release/src/selq}")
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$W"
CAL=()
for c in ${CALIB:-}; do CAL+=(--calibration-text "$c"); done
MODELS=()
declare -A RECIPE=([nvfp4]=llama-nvfp4 [mxfp4]="$HERE/recipes/mxfp4-w4a16.yaml" [int4-g64]="$HERE/recipes/int4-g64-w4a16.yaml")
for fmt in ${FORMATS:-nvfp4 mxfp4 int4-g64}; do
  f=$fmt:${RECIPE[$fmt]}
  for r in nearest mse gptq; do
    m=q-${f%%:*}-$r
    MODELS+=("$m")
    [ -f "$W/$m/selq-manifest.json" ] && continue
    /usr/bin/time -f "$m: %e s, %M KB" $S quantize "$BASE" "$W/$m" --recipe "${f#*:}" --rounding $r "${CAL[@]}" -q
  done
done
# The sources selq holds out of its calibration mix, by domain, and WikiText-2 where ../shared has it.
mapfile -t DOMAINS < <("$HERE/held_out_texts.sh" "$S" "$W")
for d in "${DOMAINS[@]}"; do
  [ -f "$W/eval-$d.json" ] && continue
  (cd "$W" && $S eval "$BASE" "${MODELS[@]}" --text "held-out-$d.txt" --max-tokens "$TOKENS" --context 128 \
    --max-prompts 0 --json -q > "eval-$d.json.tmp" && mv "eval-$d.json.tmp" "eval-$d.json")
done
FORMATS="${FORMATS:-}" python3 "$HERE/domains.py" "$W" "${DOMAINS[@]}"

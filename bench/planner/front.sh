#!/usr/bin/env bash
# The planner's evidence on a real model (docs/QUALITY.md, "Planned mixes"):
# one sensitivity table (all three tiers, on calibration text), planned mixes
# at several budgets per tier, the uniform schemes, the hand recipe llama-mix
# and two sensitivity-blind mixes, all quantized and evaluated on held-out
# text, then summarised (summarize.py) and drawn (selq chart).
#
#   bench/planner/front.sh [--src DIR] [--out DIR] [--tokens N] [--budgets "4.5 5 ..."]
#                          [--tiers "data-free measured"] [--cal-tokens N] [--probes a,b] [--probe-every N]
#                          [--blind-bpw B]
#
# DIR defaults to the BF16 SmolLM2 that `scripts/demo.sh` imports. For the
# 1.5B Qwen (docs/QUALITY.md): --src QWEN --tokens 1024 --budgets "6.5 7.0 7.7"
# --tiers "data-free measured" --probes nvfp4-w4a16 --probe-every 4 --cal-tokens 128 --blind-bpw 7.0
set -euo pipefail
cd "$(dirname "$0")/../.."
SELQ="${SELQ:-build/release/src/selq}"
SRC=/tmp/selq-demo/smollm2/smollm2-135m-bf16
OUT=/tmp/selq-planner-front
TOKENS=4096          # held-out evaluation tokens (Emma)
CAL_TOKENS=256       # calibration tokens for the runtime tiers (Sense and Sensibility)
BUDGETS="4.5 5.0 5.5 6.0 7.0 7.7 8.5"
TIERS="data-free activation-aware measured"
PROBES=nvfp4-w4a16,mxfp4-w4a4
PROBE_EVERY=1
BLIND_BPW=6.0
HARDWARE=blackwell
while [ $# -gt 0 ]; do
  case "$1" in
    --src) SRC="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --tokens) TOKENS="$2"; shift 2 ;;
    --budgets) BUDGETS="$2"; shift 2 ;;
    --hardware) HARDWARE="$2"; shift 2 ;;
    --tiers) TIERS="$2"; shift 2 ;;
    --cal-tokens) CAL_TOKENS="$2"; shift 2 ;;
    --probes) PROBES="$2"; shift 2 ;;
    --probe-every) PROBE_EVERY="$2"; shift 2 ;;
    --blind-bpw) BLIND_BPW="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[ -f "$SRC/config.json" ] || { echo "no checkpoint at $SRC (run scripts/demo.sh first, or pass --src)" >&2; exit 1; }
mkdir -p "$OUT/recipes" "$OUT/models"
SENS="$OUT/sens.json"
if [ ! -f "$SENS" ]; then
  /usr/bin/time -f "sensitivity: %e s, %M KB max RSS" "$SELQ" sensitivity "$SRC" --tier measured --hardware "$HARDWARE" \
    --calibration-tokens "$CAL_TOKENS" --probes "$PROBES" --probe-every "$PROBE_EVERY" -o "$SENS" -q
fi
. bench/planner/quantize_once.sh
for r in llama-fp8 llama-nvfp4 llama-mxfp4 llama-mix; do quantize "uniform-$r" "$r"; done
for tier in $TIERS; do
  for b in $BUDGETS; do
    "$SELQ" plan "$SRC" --sensitivity "$SENS" --tier "$tier" --hardware "$HARDWARE" --target-bpw "$b" \
      --emit-recipe "$OUT/recipes/$tier-$b.yaml" --json > "$OUT/recipes/$tier-$b.plan.json"
    quantize "$tier-$b" "$OUT/recipes/$tier-$b.yaml"
  done
done
# A sensitivity-blind mix: FP8 W8A8 for the layers nearest the two ends
# (llama.cpp's "more bits for the first and last layers"), NVFP4 elsewhere.
python3 bench/planner/blind_mix.py --src "$SRC" --bpw "$BLIND_BPW" --out "$OUT/recipes/ends-$BLIND_BPW.yaml" --selq "$SELQ"
quantize "blind-ends-$BLIND_BPW" "$OUT/recipes/ends-$BLIND_BPW.yaml"
/usr/bin/time -f "eval: %e s" "$SELQ" eval "$SRC" "${MODELS[@]}" --max-tokens "$TOKENS" --context 128 \
  --max-prompts 0 --json -q > "$OUT/eval.json"
python3 bench/planner/summarize.py "$OUT" "$BLIND_BPW" > "$OUT/summary.md"
"$SELQ" chart "$OUT/front.json" -o "$OUT/front.svg"
cat "$OUT/summary.md"
echo "picture: $OUT/front.svg"

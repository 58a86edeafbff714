#!/usr/bin/env bash
# What `selq plan --refine` buys (docs/QUALITY.md, "Refined mixes"): for each
# tier and budget, the solver's mix and its end-to-end refinement on
# calibration text (Sense and Sensibility), both quantized and evaluated on
# held-out text (Emma) in one `selq eval`, so their difference is paired.
# Reuses bench/planner/front.sh's sensitivity table and unrefined models.
#
#   bench/planner/refine.sh [--front DIR] [--evaluations N] [--tokens N] [--budgets "4.5 6.0 7.7"]
set -euo pipefail
cd "$(dirname "$0")/../.."
SELQ="${SELQ:-build/release/src/selq}"
SRC=/tmp/selq-demo/smollm2/smollm2-135m-bf16
FRONT=/tmp/selq-planner-front   # front.sh's --out
OUT=/tmp/selq-planner-refine
EVALUATIONS=32
REFINE_TOKENS=512
TOKENS=2048
BUDGETS="4.5 6.0 7.7"
TIERS="data-free measured"
HARDWARE=blackwell
while [ $# -gt 0 ]; do
  case "$1" in
    --src) SRC="$2"; shift 2 ;;
    --front) FRONT="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --evaluations) EVALUATIONS="$2"; shift 2 ;;
    --tokens) TOKENS="$2"; shift 2 ;;
    --budgets) BUDGETS="$2"; shift 2 ;;
    --tiers) TIERS="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
SENS="$FRONT/sens.json"
[ -f "$SENS" ] || { echo "no $SENS: run bench/planner/front.sh first" >&2; exit 1; }
mkdir -p "$OUT/recipes" "$OUT/models"
. bench/planner/quantize_once.sh
for tier in $TIERS; do
  for b in $BUDGETS; do
    if [ -f "$FRONT/models/$tier-$b/config.json" ]; then
      MODELS+=("$FRONT/models/$tier-$b")  # the front's unrefined mix (same table, budget and default hardware)
    else
      "$SELQ" plan "$SRC" --sensitivity "$SENS" --tier "$tier" --hardware "$HARDWARE" --target-bpw "$b" \
        --emit-recipe "$OUT/recipes/$tier-$b.yaml" --json > "$OUT/recipes/$tier-$b.plan.json"
      quantize "$tier-$b" "$OUT/recipes/$tier-$b.yaml"
    fi
    /usr/bin/time -f "refine $tier $b: %e s wall, %U s user" "$SELQ" plan "$SRC" --sensitivity "$SENS" --tier "$tier" \
      --hardware "$HARDWARE" --target-bpw "$b" --refine "$EVALUATIONS" --calibration-tokens "$REFINE_TOKENS" -q \
      --emit-recipe "$OUT/recipes/$tier-$b-refined.yaml" --json > "$OUT/recipes/$tier-$b-refined.plan.json"
    quantize "$tier-$b-refined" "$OUT/recipes/$tier-$b-refined.yaml"
  done
done
"$SELQ" eval "$SRC" "${MODELS[@]}" --max-tokens "$TOKENS" --context 128 --max-prompts 0 --json -q > "$OUT/eval.json"
python3 bench/planner/refine_summary.py "$OUT"

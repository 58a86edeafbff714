#!/usr/bin/env bash
# GPTQ on routed experts that few calibration tokens reach (issue 49): a synthetic
# DeepSeek-V3 MoE with the real router's form (selq synth; transformers loads it) whose
# 64 experts of 2 per token get ~64 calibration tokens each against 448 inputs (DeepSeek-V3
# at 8192 tokens: ~224 against 7168), routed experts MXFP4 W4A16 rounded by nearest and by
# gptq with --gptq-expert-prior 0 (each expert's own Hessian), 0.25 (the default), 1 and 4,
# evaluated on the held-out domains (FOLDOC, libstdc++, Moby-Dick); KL with the paired 95%
# intervals against nearest's and against prior 0's (rare_experts.py).
#   bench/rounding/rare_experts.sh WORKDIR [CALIBRATION_TOKENS] [EVAL_TOKENS]
set -euo pipefail
W=$1 CTOK=${2:-2048} ETOK=${3:-2048}
S=$(realpath "${SELQ:-build/release/src/selq}")
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$W"
[ -d "$W/src" ] || $S synth --arch deepseek-v3 --scale 16 --layers 3 --experts 64 --vocab 512 "$W/src" > /dev/null
cat > "$W/experts.yaml" <<'YAML'
name: experts-mxfp4-w4a16
arch: deepseek-v3
dialect: compressed-tensors
rules:
  - match: "*mlp.experts.*"
    scheme: mxfp4
    options: {activations: none}
YAML
MODELS=(q-nearest)
[ -d "$W/q-nearest" ] || $S quantize "$W/src" "$W/q-nearest" --recipe "$W/experts.yaml" -q
for p in 0 0.25 1 4; do
  MODELS+=("q-gptq-p$p")
  [ -f "$W/q-gptq-p$p/selq-manifest.json" ] && continue
  /usr/bin/time -f "q-gptq-p$p: %e s, %M KB" $S quantize "$W/src" "$W/q-gptq-p$p" --recipe "$W/experts.yaml" \
    --rounding gptq --gptq-expert-prior "$p" --calibration-tokens "$CTOK" -q
done
mapfile -t DOMAINS < <("$HERE/held_out_texts.sh" "$S" "$W")
for d in "${DOMAINS[@]}"; do
  [ -f "$W/eval-$d.json" ] && continue
  (cd "$W" && $S eval src "${MODELS[@]}" --text "held-out-$d.txt" --max-tokens "$ETOK" --context 128 \
    --max-prompts 0 --json -q > "eval-$d.json.tmp" && mv "eval-$d.json.tmp" "eval-$d.json")
done
python3 "$HERE/rare_experts.py" "$W" "${DOMAINS[@]}"

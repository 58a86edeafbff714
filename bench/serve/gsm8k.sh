#!/usr/bin/env bash
# GSM8K through lm-eval against `selq serve` (docs/QUALITY.md, "GSM8K through selq serve"):
# lm-eval's own gsm8k prompt, 5-shot, regexes and stop strings, over the test split in
# ../shared/data (an optional extra: the hub is not reachable here), for a base and quantized
# outputs of it, the same LIMIT problems each; then accuracies with intervals and the paired
# differences to the base (gsm8k_table.py).
#   bench/serve/gsm8k.sh WORKDIR LIMIT BASE [QUANT...]
# The few-shot examples come from the test split itself (lm-eval's gsm8k takes them from
# train, which ../shared/data lacks); lm-eval never shows a problem its own answer.
set -euo pipefail
W=$1 LIMIT=$2; shift 2
S=$(realpath "${SELQ:-build/release/src/selq}")
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=$(realpath "$HERE/../../../shared/data/gsm8k-test.jsonl")
PY=${PYTHON:-$HOME/.cache/selq/venv/bin/python}
mkdir -p "$W/tasks"
sed -e "s|@DATA@|$DATA|" "$HERE/gsm8k_local.yaml" > "$W/tasks/gsm8k_local.yaml"
for m in "$@"; do
  name=$(basename "$m")
  [ -d "$W/out-$name" ] && continue
  port=$((20000 + RANDOM % 20000))
  "$S" serve "$m" --port $port --slots 8 --timeout 7200 -q & pid=$!
  until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 1; kill -0 $pid; done
  start=$(date +%s)
  HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 "$PY" -m lm_eval --model local-completions \
    --model_args "base_url=http://127.0.0.1:$port/v1/completions,model=$name,num_concurrent=8,max_retries=1,max_gen_toks=256,timeout=3600" \
    --tasks gsm8k_local --include_path "$W/tasks" --limit "$LIMIT" --log_samples --output_path "$W/out-$name.tmp" \
    > "$W/lm-eval-$name.log" 2>&1
  echo "$name: $(( $(date +%s) - start )) s" | tee -a "$W/times.txt"
  kill -TERM $pid; wait $pid || true
  mv "$W/out-$name.tmp" "$W/out-$name"
done
"$PY" "$HERE/gsm8k_table.py" "$W" "$@"

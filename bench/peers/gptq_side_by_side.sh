#!/usr/bin/env bash
# selq's GPTQ (`selq quantize --rounding gptq`) next to llm-compressor's
# (oneshot + GPTQModifier), weight-only in one format ($SCHEME: NVFP4A16, MXFP4A16
# or W4A16_G64, int4 symmetric group 64), on the same model, the
# same calibration tokens (first $TOKENS tokens of GSM8K test, in sequences of
# $CONTEXT) and the same held-out text (first 40000 bytes of WikiText-2 test):
# wall time and peak RSS of each quantizer (/usr/bin/time -v) and quality
# against the base with `selq eval` (selq nearest and mse as references).
#
#   bench/peers/gptq_side_by_side.sh
#
# The peers venv is made as bench/peers/setup_peers.sh makes it (llmcompressor
# only). Before each timing the 1-minute load average is read; above $MAX_LOAD
# the script waits (up to $LOAD_WAIT s) and then goes on, noting it. The load
# is also sampled every 15 s during each timing ($WORK/load-*.log).
# Environment (defaults in brackets):
#   SELQ [build/release/src/selq]  BASE [build/release/tests/crosscheck_runtime/smollm2]
#   WORK [/tmp/gptq_bench]         PEERS_VENV [~/.cache/selq/peers-venv]
#   GSM8K [../shared/data/gsm8k-test.jsonl]  WIKI [../shared/data/wikitext2-test.txt]
#   TOKENS [8192] CONTEXT [512]    EVAL_TOKENS [4096] EVAL_CONTEXT [256]
#   MAX_LOAD [1.5] LOAD_WAIT [900]  SCHEME [NVFP4A16]
# While selq is being rebuilt, point SELQ at a copy so every step runs one build.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
SELQ=${SELQ:-$repo/build/release/src/selq}
BASE=${BASE:-$repo/build/release/tests/crosscheck_runtime/smollm2}
WORK=${WORK:-/tmp/gptq_bench}
VENV=${PEERS_VENV:-$HOME/.cache/selq/peers-venv}
GSM8K=${GSM8K:-$repo/../shared/data/gsm8k-test.jsonl}
WIKI=${WIKI:-$repo/../shared/data/wikitext2-test.txt}
TOKENS=${TOKENS:-8192}; CONTEXT=${CONTEXT:-512}
EVAL_TOKENS=${EVAL_TOKENS:-4096}; EVAL_CONTEXT=${EVAL_CONTEXT:-256}
MAX_LOAD=${MAX_LOAD:-1.5}; LOAD_WAIT=${LOAD_WAIT:-900}
SCHEME=${SCHEME:-NVFP4A16}
mkdir -p "$WORK"; cd "$WORK"
[[ -x /usr/bin/time ]] || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 2; }

# Inputs: GSM8K question and answer per record, records separated by a blank line.
if [[ ! -s calib.txt ]]; then
  python3 -c 'import json,sys
for l in open(sys.argv[1]): r = json.loads(l); print(r["question"]); print(r["answer"]); print()' \
    "$GSM8K" >calib.txt
fi
[[ -s wiki40k.txt ]] || head -c 40000 "$WIKI" >wiki40k.txt

if ! "$VENV/bin/python" -c 'import llmcompressor' 2>/dev/null; then
  [[ -x $VENV/bin/python ]] || python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --disable-pip-version-check llmcompressor
fi
"$VENV/bin/python" -m pip list --disable-pip-version-check 2>/dev/null \
  | grep -i -E '^(torch|transformers|compressed-tensors|llmcompressor|tokenizers) ' >versions.txt

{ lscpu | grep "Model name"; grep -o -w -E 'avx2|avx512f|avx512_bf16|avx512_vnni' /proc/cpuinfo \
    | sort -u | tr '\n' ' '; echo; echo "cores: $(nproc)"
  echo "selq: $(stat -c %y "$SELQ") sha256 $(sha256sum "$SELQ" | cut -c1-16)," \
       "tree $(git -C "$repo" rev-parse --short HEAD) + $(git -C "$repo" status --porcelain | wc -l) changed paths"
} >machine.txt

wait_quiet() {  # name: wait for the 1-min load to drop to MAX_LOAD, record it
  local waited=0 load
  while load=$(cut -d' ' -f1 /proc/loadavg); awk "BEGIN{exit !($load > $MAX_LOAD)}"; do
    if (( waited >= LOAD_WAIT )); then echo "$1: load $load still > $MAX_LOAD after ${waited}s; timing anyway" | tee -a loads.txt; break; fi
    sleep 30; waited=$((waited + 30))
  done
  echo "$1 before: $(uptime)" | tee -a loads.txt
}

timed() {  # name, command...: /usr/bin/time -v into time-NAME.txt, load sampled meanwhile
  local name=$1; shift
  wait_quiet "$name"
  (while sleep 15; do cut -d' ' -f1-3 /proc/loadavg; done) >"load-$name.log" &
  local sampler=$!
  /usr/bin/time -v -o "time-$name.txt" "$@" >"log-$name.txt" 2>&1 || { kill "$sampler"; echo "$name failed, see $WORK/log-$name.txt" >&2; exit 1; }
  kill "$sampler"
  echo "$name after:  $(uptime)" | tee -a loads.txt
}

: >loads.txt
case $SCHEME in  # selq's recipe for the same format
  NVFP4A16) RECIPE=llama-nvfp4 ;;
  MXFP4A16) RECIPE=$repo/bench/rounding/recipes/mxfp4-w4a16.yaml ;;
  W4A16_G64) RECIPE=$repo/bench/rounding/recipes/int4-g64-w4a16.yaml ;;
  *) echo "SCHEME: NVFP4A16, MXFP4A16 or W4A16_G64" >&2; exit 2 ;;
esac
Q=("$SELQ" quantize "$BASE" --recipe "$RECIPE" --force)
timed selq-nearest "${Q[@]}" selq-nearest
timed selq-mse "${Q[@]}" selq-mse --rounding mse
timed selq-gptq "${Q[@]}" selq-gptq --rounding gptq --calibration-text calib.txt \
  --calibration-tokens "$TOKENS" --calibration-context "$CONTEXT"
rm -rf llmc-gptq
timed llmc-gptq "$VENV/bin/python" "$repo/bench/peers/llmc_gptq.py" --model "$BASE" \
  --calib calib.txt --tokens "$TOKENS" --context "$CONTEXT" --out llmc-gptq --scheme "$SCHEME"

EVAL_ARGS=(--text wiki40k.txt --context "$EVAL_CONTEXT" --max-prompts 0 -q)
EVAL=("$SELQ" eval "$BASE" selq-nearest selq-mse selq-gptq llmc-gptq "${EVAL_ARGS[@]}" --max-tokens "$EVAL_TOKENS")
"${EVAL[@]}" | tee eval.txt
"${EVAL[@]}" --json >eval.json

echo; echo "== $WORK"; cat machine.txt versions.txt
for n in selq-nearest selq-mse selq-gptq llmc-gptq; do
  awk -v n="$n" -F': ' '/Elapsed/ {w = $2} /User time/ {u = $2} /System time/ {s = $2}
    /Percent of CPU/ {p = $2} /Maximum resident/ {r = $2}
    END {printf "%-13s wall %-8s user+sys %7.1f s (%s CPU)  peak RSS %5d MiB\n", n, w, u + s, p, r / 1024}' "time-$n.txt"
done
cat loads.txt
grep -q "$(sha256sum "$SELQ" | cut -c1-16)" machine.txt ||
  echo "WARNING: $SELQ changed during the run (copy it and set SELQ to time one build)"

#!/usr/bin/env bash
# The AWQ-style try of docs/QUALITY.md ("AWQ-style scaling, tried"): SmolLM2 base,
# per-input-channel scales folded into the previous op (awq_fold.py), then quantized
# with nearest and gptq and evaluated against the unfolded base on WikiText-2.
#   bench/rounding/awq_try.sh BASE WORKDIR [WIKITEXT]   # ~10 min on 2 cores
set -euo pipefail
BASE=$1 W=$2 TEXT=${3:-$(dirname "$0")/../../../shared/data/wikitext2-test.txt}
S=${SELQ:-build/release/src/selq}
PY=${PYTHON:-$HOME/.cache/selq/venv/bin/python}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$W"
$S calibrate "$BASE" -o "$W/calib.json" > /dev/null
for a in 0.25 0.5; do $PY "$HERE/awq_fold.py" "$BASE" "$W/calib.json" $a "$W/base-awq$a"; done
q() { rm -rf "$W/$2"; $S quantize "$1" "$W/$2" --recipe "$3" "${@:4}" > /dev/null 2>&1; }
for r in mxfp4:"$HERE/recipes/mxfp4-w4a16.yaml" nvfp4:llama-nvfp4; do
  n=${r%%:*} rec=${r#*:}
  q "$BASE" q-$n-near "$rec"; q "$BASE" q-$n-gptq "$rec" --rounding gptq
  for a in 0.25 0.5; do q "$W/base-awq$a" q-$n-awq$a "$rec"; q "$W/base-awq$a" q-$n-awq$a-gptq "$rec" --rounding gptq; done
done
head -c 40000 "$TEXT" > "$W/wiki40k.txt"
cd "$W" && $S eval "$BASE" q-mxfp4-* q-nvfp4-* --text wiki40k.txt --max-tokens 4096 --context 256 --max-prompts 0 --json > eval.json

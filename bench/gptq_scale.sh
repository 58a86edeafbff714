#!/usr/bin/env bash
# GPTQ on a real-size DeepSeek-V3 MoE layer (issue 49; docs/BENCHMARKS.md "GPTQ on a
# real-size DeepSeek-V3 MoE layer"): selq synth's DeepSeek-V3 at its real dimensions and
# config (a dense layer, then one MoE layer of EXPERTS routed experts of 7168 x 2048 and
# the shared expert), routed experts MXFP4 W4A16 rounded by gptq, self_attn FP8 per
# channel, the default calibration (8192 tokens), under --memory-budget BUDGET; wall
# time, peak anonymous memory and peak RSS from bench/peers/peakmem.py, the pass's
# progress lines (where the time went) timestamped, then selq verify.
#   bench/gptq_scale.sh WORKDIR [EXPERTS=32] [BUDGET=4GiB]      # 32 experts: 5.0 GB, ~14 min on 2 cores
# BASELINE=/path/to/other/selq runs that build on the same checkpoint first.
set -euo pipefail
W=$1 EXPERTS=${2:-32} BUDGET=${3:-4GiB}
S=$(realpath "${SELQ:-build/release/src/selq}")
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$W"
grep -m1 "model name" /proc/cpuinfo
[ -d "$W/src" ] || "$S" synth --arch deepseek-v3 --layers 2 --experts "$EXPERTS" --vocab 32000 "$W/src"
cp "$HERE/dsv3-experts-mxfp4-gptq.yaml" "$W/moe-gptq.yaml"
run() {  # label binary
  rm -rf "$W/out-$1" "$W/out-$1".selq-*
  local start; start=$(date +%s)
  python3 "$HERE/peers/peakmem.py" -- "$2" quantize "$W/src" "$W/out-$1" --recipe "$W/moe-gptq.yaml" \
    --memory-budget "$BUDGET" 2>&1 | grep -E "selq: gptq|wall_s" | while IFS= read -r l; do
      echo "$1 +$(( $(date +%s) - start ))s $l"; done
  "$S" verify "$W/out-$1" --against "$W/src" | tail -1
}
[ -n "${BASELINE:-}" ] && run baseline "$BASELINE"
run this "$S"

#!/usr/bin/env bash
# What `selq rotate` costs next to the quantization it precedes (docs/BENCHMARKS.md,
# "Rotation folded into the weights"): a DeepSeek-V3-shaped checkpoint at the real
# dimensions (hidden 7168, one dense and one MoE layer of EXPERTS experts, 3.4 GiB at 16),
# each run in turn ROUNDS times, source in the page cache.
# usage: bench/rotation_cost.sh SELQ WORKDIR [EXPERTS] [ROUNDS]
set -euo pipefail
SELQ=$1 WORK=$2 EXPERTS=${3:-16} ROUNDS=${4:-2}
mkdir -p "$WORK" && cd "$WORK"
cat > ds.yaml <<'YAML'
name: deepseek-v3-mxfp4-experts-fp8-attn
arch: deepseek-v3
dialect: quark
exclude: ["@router"]
rules:
  - match: "@experts"
    scheme: mxfp4
    options: {scale_rule: even, activations: mxfp4-dynamic}
  - match: "@attention"
    scheme: fp8-channel
    options: {activations: fp8-per-token}
YAML
[ -d src ] || "$SELQ" synth --arch deepseek-v3 --scale 1 --layers 2 --experts "$EXPERTS" --vocab 32000 src
du -sh src
cat src/*.safetensors > /dev/null  # into the page cache
t() { local label=$1; shift; rm -rf out; /usr/bin/time -f "$label %e s wall %U s user %M KB maxrss" "$@" -q; }
for _ in $(seq "$ROUNDS"); do
  t quantize "$SELQ" quantize src out --recipe ds.yaml --force
  t rotate-r1 "$SELQ" rotate src out --rotation r1 --force
  t rotate-r1-b32 "$SELQ" rotate src out --rotation r1 --block 32 --force
  t rotate-r1r2 "$SELQ" rotate src out --rotation r1r2 --force
  t quantize-rotation-r1 "$SELQ" quantize src out --recipe ds.yaml --rotation r1 --force
done
rm -rf out

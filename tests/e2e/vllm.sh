#!/usr/bin/env bash
# The real vLLM (CPU build) loads selq's outputs of the real SmolLM2 and scores
# or generates with them (bench/vllm/crosscheck.py, 256 tokens: BF16 perplexity
# within 2% of selq's runtime; INT4 W4A16, group 64 (also rotated r1, its head
# written out) and per channel, scored where
# the CPU has vLLM's kernel (AVX-512), else "loaded, no kernel"; INT8 W8A16 parsed
# as uint8b128, for which vLLM's CPU backend has no kernel; FP8 dynamic in all
# three dialects loads and generates the same token), and vLLM's weight loader
# reads every routed expert's static FP8 input scale as selq wrote it on a
# synthetic DeepSeek-V3 whose experts mostly got no calibration token
# (bench/vllm/moe_static_scales.py, in all three dialects).
# Skips (77) locally without the vLLM venv, fails under CI=true.
# usage: vllm.sh SELQ TEST_PYTHON SOURCE_DIR
set -euo pipefail
SELQ=$1 PY=$2 SRC=$3
VLLM_PY="${VLLM_VENV:-$HOME/.cache/selq/vllm-venv}/bin/python"
if ! "$VLLM_PY" -c "import vllm" 2>/dev/null; then
  echo "reference missing: vLLM (bench/vllm/setup_vllm.sh; scripts/setup.sh test runs it)"
  [ "${CI:-}" = true ] && exit 1 || exit 77
fi
GGUF=$("$PY" -c "import sys; sys.path.insert(0, '$SRC/tests/crosscheck'); import xref; print(xref.smollm2_gguf())")
WORK=$(mktemp -d /tmp/selq-vllm-e2e.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
"$SELQ" import-gguf "$GGUF" "$WORK/bf16" >/dev/null
"$VLLM_PY" "$SRC/bench/vllm/crosscheck.py" --selq "$SELQ" --base "$WORK/bf16" --work "$WORK" --tokens 256 \
  --cases bf16,w4a16-g64,w4a16-g64-r1,w4a16-channel,w8a16-int8,fp8-dynamic-ct,fp8-dynamic-quark,fp8-dynamic-modelopt 2>"$WORK/vllm.err" | tee "$WORK/out.jsonl" \
  || { tail -40 "$WORK/vllm.err"; exit 1; }
"$VLLM_PY" "$SRC/bench/vllm/moe_static_scales.py" --selq "$SELQ" --work "$WORK" 2>"$WORK/moe.err" \
  || { tail -40 "$WORK/moe.err"; exit 1; }

#!/usr/bin/env bash
# Conformance of selq against each installed peer, for every scheme both tools
# support, on the imported real model (SmolLM2-135M) and a small synthetic
# llama checkpoint: runs selq and the peer, then conformance.py on the pair.
# Usage: [CKPTS="real synth"] bench/peers/conformance.sh [selq-binary] [peer:scheme ...]
set -uo pipefail
cd "$(dirname "$0")/../.."
SELQ="${1:-build/release/src/selq}"; shift || true
PY="${PEERS_VENV:-$HOME/.cache/selq/peers-venv}/bin/python"
PAIRS=("$@")
[[ ${#PAIRS[@]} == 0 ]] && PAIRS=(llmcompressor:FP8_DYNAMIC llmcompressor:FP8_BLOCK llmcompressor:NVFP4A16
                                  llmcompressor:MXFP4 llmcompressor:w8a16 quark:mxfp4 quark:ptpc_fp8 modelopt:nvfp4)
declare -A RECIPE=(
  [llmcompressor:FP8_DYNAMIC]="fp8-dynamic compressed-tensors" [llmcompressor:FP8_BLOCK]="fp8-block compressed-tensors"
  [llmcompressor:NVFP4A16]="nvfp4a16 compressed-tensors" [llmcompressor:MXFP4]="mxfp4 compressed-tensors"
  [llmcompressor:w8a16]="w8a16 compressed-tensors"
  [quark:mxfp4]="mxfp4 quark" [quark:ptpc_fp8]="ptpc-fp8 quark" [modelopt:nvfp4]="nvfp4a16 modelopt")
WORK="$(mktemp -d /dev/shm/selq-conf.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
"$SELQ" synth --arch llama --layers 2 "$WORK/synth" >/dev/null || exit 1
gguf=$("$HOME/.cache/selq/venv/bin/python" -c \
  'import sys; sys.path.insert(0, "tests/crosscheck"); import xref; print(xref.smollm2_gguf())') || exit 1
"$SELQ" import-gguf "$gguf" "$WORK/real" >/dev/null || exit 1
status=0
for ckpt in ${CKPTS:-real synth}; do
  for p in "${PAIRS[@]}"; do
    read -r recipe dialect <<<"${RECIPE[$p]}"
    echo "=== $ckpt $p vs selq $recipe ($dialect)"
    rm -rf "$WORK/selq" "$WORK/peer"
    "$SELQ" quantize "$WORK/$ckpt" "$WORK/selq" --recipe "bench/peers/recipes/$recipe.yaml" \
      --dialect "$dialect" --quiet || { echo "selq failed"; status=1; continue; }
    if ! "$PY" bench/peers/run_peer.py "${p%%:*}" "${p#*:}" "$WORK/$ckpt" "$WORK/peer" \
        --threads "$(nproc)" >"$WORK/peer.log" 2>&1; then
      echo "peer failed:"; grep -v -E '^\s*$' "$WORK/peer.log" | tail -n 4; status=1; continue
    fi
    "$PY" bench/peers/conformance.py "$WORK/$ckpt" "$WORK/selq" "$WORK/peer" || status=1
  done
done
exit $status

#!/usr/bin/env bash
# Memory and time of the reference runtime on a large MoE checkpoint: `selq
# calibrate` (one forward per window over N tokens, every linear hooked) on a
# synthetic BF16 DeepSeek-V3, with this build and, when given, a baseline
# build in the same rounds. Peak anonymous memory (what selq holds) and peak
# RSS (which counts the checkpoint's mapped pages too) come from peakmem.py.
#
#   bench/runtime_memory.sh CKPT [--baseline OTHER_SELQ] [--tokens N] [--rounds R]
#
# Make CKPT with e.g. `selq synth --arch deepseek-v3 --scale 2 --layers 6 --experts 64 CKPT`
# (8.8 GB; --layers 20: 29 GB, more than this 24 GB machine's RAM). docs/BENCHMARKS.md
# "Runtime memory" has the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
CKPT="$1"; shift
SELQ="${SELQ:-build/release/src/selq}"
BASELINE="" TOKENS=64 ROUNDS=2
while [ $# -gt 0 ]; do
  case "$1" in
    --baseline) BASELINE="$2"; shift 2 ;;
    --tokens) TOKENS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
PY="${PYTHON:-python3}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
grep -m1 "model name" /proc/cpuinfo
echo "checkpoint: $CKPT ($(du -sh "$CKPT" | cut -f1)), $TOKENS tokens in one window"
# The old spellings (--max-tokens, --context), which a baseline build before the
# vocabulary change also takes.
run() {  # label binary
  "$PY" bench/peers/peakmem.py -- "$2" calibrate "$CKPT" --max-tokens "$TOKENS" \
    --context "$TOKENS" -o "$OUT/c.json" -q 2>&1 | tail -1 | sed "s/^/$1: /"
}
for r in $(seq "$ROUNDS"); do
  echo "round $r (load $(cut -d' ' -f1 /proc/loadavg))"
  run "this build" "$SELQ"
  [ -n "$BASELINE" ] && run "baseline" "$BASELINE"
done

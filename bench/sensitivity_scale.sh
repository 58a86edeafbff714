#!/usr/bin/env bash
# The planner's runtime tiers on a real-size DeepSeek-V3 MoE layer (issue 49; docs/BENCHMARKS.md
# "Sensitivity tiers on a real-size DeepSeek-V3 MoE layer"): selq synth's DeepSeek-V3 at its
# real dimensions (a dense layer, then one MoE layer of EXPERTS routed experts of 7168 x 2048),
# `selq sensitivity --tier TIER` with its default candidates and calibration; wall time, peak
# anonymous memory and peak RSS from bench/peers/peakmem.py.
#   bench/sensitivity_scale.sh WORKDIR [EXPERTS=32] [TIER=activation-aware]
# BASELINE=/path/to/other/selq runs that build on the same checkpoint first.
set -euo pipefail
W=$1 EXPERTS=${2:-32} TIER=${3:-activation-aware}
S=$(realpath "${SELQ:-build/release/src/selq}")
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$W"
grep -m1 "model name" /proc/cpuinfo
[ -d "$W/src" ] || "$S" synth --arch deepseek-v3 --layers 2 --experts "$EXPERTS" --vocab 32000 "$W/src"
run() {  # label binary
  python3 "$HERE/peers/peakmem.py" -- "$2" sensitivity "$W/src" --tier "$TIER" -o "$W/sens-$1.json" -q 2>&1 |
    sed "s/^/$1 /"
}
[ -n "${BASELINE:-}" ] && run baseline "$BASELINE"
run this "$S"
[ -n "${BASELINE:-}" ] && python3 - "$W/sens-baseline.json" "$W/sens-this.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for d in (a, b):
    d.pop("seconds", None)
print("same scores as the baseline:", a == b)
PY

#!/usr/bin/env bash
# Seed 003's Quark run against selq's kimi-k3-mxfp4-attnfp8, on one small
# synthetic Kimi-K3 (3 layers, 4 experts, 1/64 width): both quantize the same
# source, then compare.py --check accounts for every difference (exit 1 on any
# it cannot explain). Then the seed's own layout the same way: Quark with the
# kimi_k3 template its script registers (shared experts excluded) against
# selq's kimi-k3-seed003, in the same Quark process. Needs amd-quark 0.13 in the test venv (scripts/setup.sh
# test) or the peers venv (bench/peers/setup_peers.sh), and numpy + ml_dtypes in
# the test venv. Skips (77) without it, fails under CI=true.
# usage: bench/quark/run.sh SELQ [WORK]     (env PEERS_VENV, SELQ_VENV override the venvs)
set -euo pipefail
SELQ=$(realpath "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
if [[ $# -ge 2 ]]; then WORK=$2; else WORK=$(mktemp -d /tmp/selq-quark-seed003.XXXXXX); trap 'rm -rf "$WORK"' EXIT; fi
TEST_PY="${SELQ_VENV:-$HOME/.cache/selq/venv}/bin/python"
# Quark from the test venv (scripts/setup.sh test installs it there), else the peers venv.
PEERS_PY="$TEST_PY"
"$PEERS_PY" -c "import quark" 2>/dev/null || PEERS_PY="${PEERS_VENV:-$HOME/.cache/selq/peers-venv}/bin/python"
if ! "$PEERS_PY" -c "import quark" 2>/dev/null; then
  echo "amd-quark missing: run scripts/setup.sh test (or bench/peers/setup_peers.sh)"
  [ "${CI:-}" = true ] && exit 1 || exit 77
fi
rm -rf "$WORK/src" "$WORK/quark" "$WORK/selq" "$WORK/quark-seed" "$WORK/selq-seed"
mkdir -p "$WORK"
"$SELQ" synth --arch kimi-k3 --scale 64 --layers 3 --experts 4 "$WORK/src" >/dev/null
t0=$(date +%s%N)
SELQ_RECIPES_DIR="$HERE/../../recipes" "$SELQ" quantize "$WORK/src" "$WORK/selq" \
  --recipe kimi-k3-mxfp4-attnfp8 -q 2>"$WORK/selq.err"
t1=$(date +%s%N)
SELQ_RECIPES_DIR="$HERE/../../recipes" "$SELQ" quantize "$WORK/src" "$WORK/selq-seed" --recipe kimi-k3-seed003 -q
# --read-back: Quark's own config parser must accept selq's quantization_config too.
"$PEERS_PY" "$HERE/seed003_quark.py" "$WORK/src" "$WORK/quark" --read-back "$WORK/selq" \
  --seed-layout "$WORK/quark-seed" >"$WORK/quark.log" 2>&1 \
  || { tail -30 "$WORK/quark.log"; exit 1; }
grep -F "QConfig.from_dict reads" "$WORK/quark.log"
t2=$(date +%s%N)
echo "selq quantize $(( (t1 - t0) / 1000000 )) ms, quark (its import included) $(( (t2 - t1) / 1000000 )) ms"
"$TEST_PY" "$HERE/compare.py" "$WORK/src" "$WORK/quark" "$WORK/selq" --json "$WORK/compare.json" --check
echo "== the seed's own layout (shared experts BF16): Quark with its script's template vs kimi-k3-seed003"
"$TEST_PY" "$HERE/compare.py" "$WORK/src" "$WORK/quark-seed" "$WORK/selq-seed" --json "$WORK/compare-seed.json" --check
"$TEST_PY" - "$WORK/compare-seed.json" <<'PY'
import json, sys
mods = [m for m in json.load(open(sys.argv[1]))["modules"] if ".shared_experts." in m["module"]]
assert mods and all(m["quark"] == m["selq"] == "bf16" for m in mods), mods
print(f"shared experts BF16 on both sides: {len(mods)} modules")
PY

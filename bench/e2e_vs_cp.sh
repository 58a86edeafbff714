#!/usr/bin/env bash
# End-to-end throughput of `selq quantize` on page-cached input, as a ratio to
# `cp -r` of the same files in the same run (output on tmpfs so the disk is not
# the limit).
#
# Usage: [RECIPES="r1 r2"] [REPEATS=5] [SRC=dir] [DIALECT=d] bench/e2e_vs_cp.sh [selq-binary] [synth args...]
#   RECIPES  names under recipes/ or paths to recipe files (default dspark-oproj-mxfp4)
#   SRC      an existing checkpoint instead of a synthetic one (e.g. the imported real model)
#   DIALECT  passed as --dialect (default: each recipe's own)
#   BASELINE another selq binary (e.g. an older build) timed on every recipe in
#            the same rounds, reported as "<recipe>@baseline"
#
# Method: one untimed warm-up of cp and of every recipe, then REPEATS rounds,
# each timing cp and every recipe once (interleaved, so drift hits them all
# alike). Prints min and median per command and the speed ratio cp/selq of
# the minima and of the medians. The warm-up matters on a VM: the first pass
# over memory the guest has not touched yet runs at a third of the speed of
# later ones, whatever the program (cp included).
set -euo pipefail
SELQ="${1:-build/release/src/selq}"; shift || true
SYNTH_ARGS=("${@:---arch dspark --layers 2 --vocab 32000}")
REPEATS="${REPEATS:-5}"
WORK="$(mktemp -d /dev/shm/selq-bench.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
# shellcheck disable=SC2068
if [[ -n "${SRC:-}" ]]; then
  ln -s "$(realpath "$SRC")" "$WORK/src"
else
  "$SELQ" synth ${SYNTH_ARGS[@]} "$WORK/src" >/dev/null
fi
bytes=$(du -sbL "$WORK/src" | cut -f1)
DIALECT_ARGS=(); [[ -n "${DIALECT:-}" ]] && DIALECT_ARGS=(--dialect "$DIALECT")

run() {  # run NAME: one timed execution, output removed afterwards; prints ms
  local name=$1 t0 t1
  rm -rf "$WORK/out"
  t0=$(date +%s%N)
  if [[ $name == cp ]]; then
    cp -rL "$WORK/src" "$WORK/out"
  else
    local bin="$SELQ" recipe="${name%@baseline}"
    [[ $name == *@baseline ]] && bin="$BASELINE"
    [[ -f "$recipe" ]] || recipe="recipes/$recipe.yaml"
    "$bin" quantize "$WORK/src" "$WORK/out" --recipe "$recipe" "${DIALECT_ARGS[@]}" --quiet
  fi
  t1=$(date +%s%N)
  rm -rf "$WORK/out"
  echo $(((t1 - t0) / 1000000))
}

names=(cp)
for r in ${RECIPES:-dspark-oproj-mxfp4}; do
  names+=("$r")
  [[ -n "${BASELINE:-}" ]] && names+=("$r@baseline")
done
for n in "${names[@]}"; do run "$n" >/dev/null; done  # warm-up
declare -A times
for ((i = 0; i < REPEATS; i++)); do
  for n in "${names[@]}"; do times[$n]+="$(run "$n") "; done
done
{
  echo "$bytes"
  for n in "${names[@]}"; do echo "$n ${times[$n]}"; done
} | python3 -c '
import statistics, sys
lines = sys.stdin.read().splitlines()
b = int(lines[0])
t = {l.split()[0]: [int(x) / 1000 for x in l.split()[1:]] for l in lines[1:]}
cp = t.pop("cp")
print(f"{b/1e9:.2f} GB, {len(cp)} rounds after a warm-up; cp min {min(cp):.2f} s, median {statistics.median(cp):.2f} s")
for name, v in t.items():
    print(f"{name:40s} min {min(v):5.2f} s  median {statistics.median(v):5.2f} s  "
          f"speed/cp: of minima {min(cp)/min(v):4.2f}, of medians {statistics.median(cp)/statistics.median(v):4.2f}")
'
